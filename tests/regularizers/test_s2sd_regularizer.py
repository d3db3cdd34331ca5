"""S2SD maths (docs/methods/s2sd.md): row-wise similarity KL with known values, teacher detached, term composition,
feature-distillation delay, pooled feature-map input, parameter groups, and the unchanged test-time model."""

from __future__ import annotations

import math
import tomllib
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from e2e import TINY_RECIPE

from dmlplug_builtins.s2sd.regularizer import S2SD, similarity_kl


def _rowwise_kl_by_hand(teacher, student, t):
    """T²/B · Σ_i Σ_j q_ij (ln q_ij − ln p_ij) with plain floats."""
    total = 0.0
    for t_row, s_row in zip(teacher, student, strict=True):
        q = [math.exp(v / t) for v in t_row]
        p = [math.exp(v / t) for v in s_row]
        q = [v / sum(q) for v in q]
        p = [v / sum(p) for v in p]
        total += sum(qi * (math.log(qi) - math.log(pi)) for qi, pi in zip(q, p, strict=True))
    return t * t * total / len(student)


def test_kl_is_zero_when_teacher_and_student_match():
    torch.manual_seed(0)
    z = F.normalize(torch.randn(6, 5), dim=1)
    s = z @ z.t()
    assert float(similarity_kl(s, s.clone(), 1.0)) == pytest.approx(0.0, abs=1e-6)
    assert float(similarity_kl(s, s.clone(), 0.1)) == pytest.approx(0.0, abs=1e-6)


def test_kl_known_values_on_a_two_sample_example():
    student = [[1.0, 0.0], [0.0, 1.0]]
    teacher = [[1.0, 1.0], [1.0, 1.0]]
    # Row 1: q = (½, ½), p = (e/(e+1), 1/(e+1)); both rows alike; divided by B = 2.
    p1 = math.e / (math.e + 1)
    by_formula = 0.5 * math.log(0.5 / p1) + 0.5 * math.log(0.5 / (1 - p1))
    assert by_formula == pytest.approx(0.120114, abs=1e-6)
    got = similarity_kl(torch.tensor(teacher), torch.tensor(student), 1.0)
    assert float(got) == pytest.approx(by_formula, abs=1e-6)
    # T = 2 softens both sides and multiplies by T² = 4.
    got2 = similarity_kl(torch.tensor(teacher), torch.tensor(student), 2.0)
    assert float(got2) == pytest.approx(_rowwise_kl_by_hand(teacher, student, 2.0), abs=1e-6)
    # p = sigmoid(½) = 0.622459: 4 · (½ ln(½/p) + ½ ln(½/(1−p))) = 0.1237192.
    assert float(got2) == pytest.approx(0.1237192, abs=1e-6)


def test_kl_direction_normalisation_and_diagonal():
    torch.manual_seed(1)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    expected = _rowwise_kl_by_hand(a.tolist(), b.tolist(), 1.0)
    assert float(similarity_kl(a, b, 1.0)) == pytest.approx(expected, rel=1e-5)
    # KL is asymmetric: the teacher is the first argument (a swapped implementation gives another value).
    assert float(similarity_kl(b, a, 1.0)) != pytest.approx(expected, rel=1e-3)


def test_teacher_is_detached_and_student_gets_gradient():
    torch.manual_seed(2)
    t = torch.randn(5, 5, requires_grad=True)
    s = torch.randn(5, 5, requires_grad=True)
    similarity_kl(t, s, 1.0).backward()
    assert t.grad is None
    assert s.grad is not None and s.grad.abs().sum() > 0


def _step(embeddings, features, labels, feature_map=None):
    return SimpleNamespace(embeddings=embeddings, features=features, feature_map=feature_map, labels=labels)


class _SumLoss(torch.nn.Module):
    """A criterion with a known value: mean of the embedding entries times (1 + the dimension)."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, emb, labels, indices_tuple=None):
        assert emb.shape[1] == self.dim and indices_tuple is None
        return emb.mean() * (1 + self.dim)


def test_terms_compose_as_in_the_reference():
    torch.manual_seed(3)
    reg = S2SD(6, [4, 8], _SumLoss, temperature=1.0, distill_weight=50.0, target_weight=0.5)
    features = torch.randn(5, 6)
    base = F.normalize(torch.randn(5, 3), dim=1)
    labels = torch.tensor([0, 0, 1, 1, 2])
    terms = reg(_step(base, features, labels))
    assert set(terms) == {"targets", "distill"}
    s = base @ base.t()
    losses, kls = [], []
    for head in reg.heads:
        with torch.no_grad():
            z = F.normalize(head.net(features), dim=1)
        losses.append(z.mean() * (1 + z.shape[1]))
        kls.append(_rowwise_kl_by_hand((z @ z.t()).tolist(), s.tolist(), 1.0))
    assert float(terms["targets"].detach()) == pytest.approx(0.5 * float(sum(losses) / 2), rel=1e-5)
    assert float(terms["distill"].detach()) == pytest.approx(50.0 * sum(kls) / 2, rel=1e-4)


def test_distill_is_zero_when_a_target_space_equals_the_base_space():
    torch.manual_seed(4)
    reg = S2SD(6, [3], _SumLoss)
    features = torch.randn(5, 6)
    with torch.no_grad():
        base = reg.heads[0](features)
    terms = reg(_step(base, features, torch.zeros(5, dtype=torch.long)))
    assert float(terms["distill"]) == pytest.approx(0.0, abs=1e-5)


def test_gradients_of_the_distillation_reach_only_the_base_side():
    torch.manual_seed(5)
    reg = S2SD(6, [4], _SumLoss, target_weight=0.0)
    features = torch.randn(5, 6, requires_grad=True)
    raw = torch.randn(5, 3, requires_grad=True)
    terms = reg(_step(F.normalize(raw, dim=1), features, torch.zeros(5, dtype=torch.long)))
    terms["distill"].backward()
    assert raw.grad is not None and raw.grad.abs().sum() > 0
    # Teacher detached: neither the target head nor (through it) the features get distillation gradient.
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in reg.heads.parameters())
    assert features.grad is None or features.grad.abs().sum() == 0


def test_target_loss_trains_the_heads_and_the_backbone_features():
    torch.manual_seed(6)
    reg = S2SD(6, [4], _SumLoss, distill_weight=0.0)
    features = torch.randn(5, 6, requires_grad=True)
    terms = reg(_step(F.normalize(torch.randn(5, 3), dim=1), features, torch.zeros(5, dtype=torch.long)))
    terms["targets"].backward()
    assert features.grad is not None and features.grad.abs().sum() > 0  # f_aux is not detached
    assert all(p.grad is not None for p in reg.heads.parameters())


def test_feature_distillation_starts_after_the_delay_and_counts_training_iterations():
    torch.manual_seed(7)
    reg = S2SD(6, [4], _SumLoss, feature_distill=True, feature_weight=5.0, feature_delay=2)
    features = torch.randn(5, 6)
    base = F.normalize(torch.randn(5, 3), dim=1)
    step = _step(base, features, torch.zeros(5, dtype=torch.long))
    assert "features" not in reg(step) and "features" not in reg(step)
    terms = reg(step)
    teacher = F.normalize(features, dim=1)
    expected = 5.0 * _rowwise_kl_by_hand((teacher @ teacher.t()).tolist(), (base @ base.t()).tolist(), 1.0)
    assert float(terms["features"]) == pytest.approx(expected, rel=1e-4)
    assert int(reg.iteration) == 3 and "iteration" in reg.state_dict()
    reg.eval()
    reg(step)
    assert int(reg.iteration) == 3  # evaluation-mode calls do not advance the counter


def test_pool_aggr_reads_avg_plus_max_of_the_feature_map():
    torch.manual_seed(8)
    reg = S2SD(6, [4], _SumLoss, pool_aggr=True)
    fmap = torch.randn(5, 6, 3, 3)
    step = _step(None, torch.zeros(5, 6), None, feature_map=fmap)
    torch.testing.assert_close(reg.auxiliary_features(step), fmap.mean((2, 3)) + fmap.amax((2, 3)))
    with pytest.raises(ValueError, match="feature map"):
        reg.auxiliary_features(_step(None, torch.zeros(5, 6), None))


def test_outside_a_run_targets_copy_a_parameter_free_loss_or_build_the_criterion_table():
    import dmlplug
    from dmlplug.errors import ComponentError, RecipeError

    contrastive = dmlplug.create("loss", "contrastive")
    reg = dmlplug.create("regularizer", "s2sd", feature_dim=6, loss=contrastive, target_dims=[4, 8])
    assert [type(c) for c in reg.criteria] == [type(contrastive)] * 2
    assert reg.criteria[0] is not contrastive and reg.criteria[0] is not reg.criteria[1]
    assert reg.miners is None  # no recipe [miner] to make fresh instances of
    proxy = dmlplug.create("loss", "proxy_anchor", num_classes=3, embedding_size=5)
    with pytest.raises(ComponentError, match="cannot make target criteria"):
        dmlplug.create("regularizer", "s2sd", feature_dim=6, loss=proxy, target_dims=[4])
    reg = dmlplug.create("regularizer", "s2sd", feature_dim=6, num_classes=3, loss=proxy, target_dims=[4, 8],
                         criterion={"name": "proxy_anchor"})
    assert [tuple(c.proxies.shape) for c in reg.criteria] == [(3, 4), (3, 8)]
    with pytest.raises(RecipeError, match="criterion: a loss table needs a `name`"):
        dmlplug.create("regularizer", "s2sd", feature_dim=6, loss=contrastive, criterion={"margin": 0.1})
    with pytest.raises(ComponentError, match="regularizer .s2sd. .plugin .s2sd.. needs feature_dim from the build"):
        dmlplug.create("regularizer", "s2sd", loss=contrastive)


# ---------------------------------------------------------------------------------------------- in a run


def _recipe(regularizer: dict | None, loss: dict | None = None) -> dict:
    raw = tomllib.loads(TINY_RECIPE)
    raw["loggers"] = []
    raw["optimizer"] = {"lr": 1e-3, "weight_decay": 4e-4}
    if loss is not None:
        raw["loss"] = loss
    if regularizer is not None:
        raw["regularizers"] = [regularizer]
    return raw


def _built_run(raw, tmp_path):
    from dmlplug.engine.run import Run
    from dmlplug.plugins import get_host
    from tests.shared.recipes import load_recipe

    host = get_host()
    run = Run(load_recipe(raw, registry=host.registry), tmp_path, host, "cpu", quiet=True)
    run.build()
    return run


def test_target_heads_and_criteria_get_their_own_groups_without_weight_decay(tmp_path):
    loss = {"name": "proxy_anchor"}
    run = _built_run(_recipe({"name": "s2sd", "target_dims": [24, 40]}, loss), tmp_path)
    groups = {g["name"]: g for g in run.optimizer.param_groups}
    assert groups["backbone"]["weight_decay"] == pytest.approx(4e-4)
    assert groups["s2sd"]["weight_decay"] == 0.0 and groups["s2sd_criteria"]["weight_decay"] == 0.0
    assert groups["s2sd"]["lr"] == pytest.approx(1e-3)
    reg = run.components.regularizers[0].module
    assert {id(p) for p in groups["s2sd"]["params"]} == {id(p) for p in reg.heads.parameters()}
    # One fresh criterion per target, sized for the target's dimension (Proxy-Anchor: C×D_k proxies).
    shapes = [tuple(c.proxies.shape) for c in reg.criteria]
    num_classes = run.ctx.num_classes
    assert shapes == [(num_classes, 24), (num_classes, 40)]
    assert reg.criteria[0] is not run.components.loss


def test_test_time_model_is_unchanged_by_s2sd(tmp_path):
    plain = _built_run(_recipe(None), tmp_path / "plain")
    s2sd = _built_run(_recipe({"name": "s2sd", "target_dims": [16]}), tmp_path / "s2sd")
    a, b = plain.model.state_dict(), s2sd.model.state_dict()
    assert list(a) == list(b)  # no target head inside the evaluated model
    for key in a:
        assert torch.equal(a[key], b[key]), key
    images = torch.randn(4, 3, 32, 32)
    plain.model.eval()
    s2sd.model.eval()
    torch.testing.assert_close(plain.model.embed(images), s2sd.model.embed(images))


def test_validate_rejects_pool_aggr_on_a_backbone_without_feature_map():
    from dmlplug.errors import RecipeError
    from tests.shared.recipes import load_recipe

    raw = _recipe({"name": "s2sd", "pool_aggr": True})
    load_recipe(raw)
    raw["backbone"] = {"name": "timm", "model": "vit_tiny_patch16_224"}
    with pytest.raises(RecipeError, match="feature map"):
        load_recipe(raw)
    raw["regularizers"][0]["pool_aggr"] = False
    load_recipe(raw)  # pooled tokens are enough without pool_aggr


def test_criterion_table_and_miner_instances_per_target(tmp_path):
    loss = {"name": "margin", "beta": 1.2}
    raw = _recipe({"name": "s2sd", "target_dims": [8, 12], "criterion": {"name": "proxy_anchor"}}, loss)
    raw["miner"] = {"name": "distance_weighted"}
    run = _built_run(raw, tmp_path)
    reg = run.components.regularizers[0].module
    assert [tuple(c.proxies.shape)[1] for c in reg.criteria] == [8, 12]
    assert reg.miners is not None and len(reg.miners) == 2
    assert type(reg.miners[0]) is type(run.components.miner)
    assert reg.miners[0] is not reg.miners[1] is not run.components.miner
    raw["regularizers"][0]["use_miner"] = False
    raw["regularizers"][0].pop("criterion")
    reg = _built_run(raw, tmp_path / "b").components.regularizers[0].module
    assert reg.miners is None and type(reg.criteria[0]) is type(run.components.loss)
    images, labels = torch.randn(8, 3, 32, 32), torch.arange(4).repeat_interleave(2)
    out = run.model(images)
    terms = reg(SimpleNamespace(embeddings=out.embedding, features=out.features, feature_map=out.feature_map,
                                labels=labels))
    assert all(torch.isfinite(t) for t in terms.values())
