"""DiVA regularizer: queue FIFO, terms on a hand-built step, parameter groups, errors, weighted-concat embedding."""

import copy
import tomllib

import pytest
import torch
import torch.nn.functional as F
from e2e import ROOT
from torch import nn

import dmlplug
from dmlplug.engine.model import EmbeddingModel
from dmlplug.errors import ComponentError, RecipeError, RunError
from dmlplug.step import StepOutput
from dmlplug_builtins.diva.terms import decorrelation, momentum_contrast_loss
from tests.shared.recipes import load_recipe

HEADS = {"discriminative": 8, "shared": 6, "selfsimilarity": 5, "intra": 7}


class TinyBackbone(nn.Module):
    num_features = 12

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3 * 2 * 2, 12)

    def forward(self, images):
        return self.fc(images.flatten(1)), None


def _model(weights=None):
    torch.manual_seed(0)
    head = dmlplug.create("head", "multi", feature_dim=12, heads=HEADS, weights=weights)
    return EmbeddingModel(TinyBackbone(), head)


def _diva(model, batch_size=6, **params):
    return dmlplug.create("regularizer", "diva", head=model.head, num_classes=4, batch_size=batch_size, **params)


def _step(model, labels, ema=None, seed=1):
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(len(labels), 3, 2, 2, generator=generator)
    view = torch.randn(len(labels), 3, 2, 2, generator=generator)
    out = model(images)
    return StepOutput(embeddings=out.embedding, labels=labels, named_embeddings=out.named, views=[view],
                      ema_model=ema if ema is not None else copy.deepcopy(model), model=model)


LABELS = torch.tensor([0, 0, 1, 1, 3, 3])


def test_queue_is_a_fifo_of_the_last_n_key_batches():
    diva = _diva(_model(), batch_size=2, n_key_batches=2)
    assert diva.queue.shape == (4, 5) and diva.valid_queue().shape == (0, 5)
    keys = [torch.full((2, 5), float(i)) for i in range(3)]
    diva.enqueue(keys[0])
    assert diva.valid_queue().tolist() == keys[0].tolist()
    diva.enqueue(keys[1])
    assert diva.valid_queue().tolist() == torch.cat(keys[:2]).tolist()
    diva.enqueue(keys[2])  # drops the oldest batch
    assert diva.valid_queue().tolist() == torch.cat(keys[1:]).tolist()
    assert int(diva.queue_filled) == 4

    # Persistent buffers: a fresh module restored from the state dict has the same queue.
    other = _diva(_model(), batch_size=2, n_key_batches=2)
    other.load_state_dict(diva.state_dict())
    assert torch.equal(other.valid_queue(), diva.valid_queue())


def test_forward_terms_match_their_definitions():
    model = _model()
    diva = _diva(model, n_key_batches=3, alpha_shared=0.5, alpha_intra=0.25, alpha_ssl=2.0, rho=[10.0, 20.0, 30.0],
                 temperature=0.1)
    with torch.no_grad():
        diva.shared_loss.beta.copy_(torch.tensor([0.5, 0.9, 1.3, 1.7]))
        diva.intra_loss.beta.copy_(torch.tensor([1.1, 0.7, 0.3, 1.5]))
    diva.enqueue(F.normalize(torch.randn(6, 5), dim=1))
    step = _step(model, LABELS)
    queue_before = diva.valid_queue().clone()

    torch.manual_seed(3)
    terms = diva(step)
    assert set(terms) == {"shared", "intra", "selfsim", "decorrelation"}

    # Replay the same random draws (permutation, negatives, intra classes, key shuffle) with the parts.
    torch.manual_seed(3)
    named = step.named_embeddings
    a, p, n = diva.shared_miner(named["shared"], LABELS)
    assert terms["shared"].item() == pytest.approx(0.5 * _margin(named["shared"], LABELS, a, p, n,
                                                                   diva.shared_loss.beta), rel=1e-6)
    a, p, n = diva.intra_miner(named["intra"], LABELS)
    assert (LABELS[a] == LABELS[n]).all()
    assert terms["intra"].item() == pytest.approx(0.25 * _margin(named["intra"], LABELS, a, p, n,
                                                                   diva.intra_loss.beta), rel=1e-6)
    # Keys of the EMA model on the second view (the shuffle does not change them: no batch statistics).
    keys = step.ema_model(step.views[0]).named["selfsimilarity"]
    expected = 2.0 * momentum_contrast_loss(named["selfsimilarity"], keys, queue_before, 0.1)
    assert terms["selfsim"].item() == pytest.approx(expected.item(), rel=1e-5)
    expected = -sum(w * decorrelation(named[s], named["discriminative"], diva.regressors[s])
                    for s, w in (("selfsimilarity", 10.0), ("shared", 20.0), ("intra", 30.0)))
    assert terms["decorrelation"].item() == pytest.approx(expected.item(), rel=1e-5)

    # The keys are enqueued after the optimizer step (FIFO), not during the forward pass.
    assert torch.equal(diva.valid_queue(), queue_before)
    diva.after_optimizer_step(step)
    assert torch.allclose(diva.valid_queue(), torch.cat([queue_before, F.normalize(keys, dim=1)]), atol=1e-6)


def _margin(x, labels, a, p, n, beta, margin=0.2):
    d_ap = ((x[a] - x[p]).pow(2).sum(1) + 1e-8).sqrt()
    d_an = ((x[a] - x[n]).pow(2).sum(1) + 1e-8).sqrt()
    b = beta[labels[a]]  # beta of the anchor's TRUE label
    pos, neg = torch.relu(d_ap - b + margin), torch.relu(b - d_an + margin)
    count = int((pos > 0).sum() + (neg > 0).sum())
    total = (pos + neg).sum()
    return float((total / count).detach()) if count else float(total.detach())


def test_pending_keys_are_enqueued_by_the_next_forward_when_the_engine_does_not():
    model = _model()
    diva = _diva(model, n_key_batches=2)
    diva(_step(model, LABELS))
    assert int(diva.queue_filled) == 0
    diva(_step(model, LABELS, seed=2))
    assert int(diva.queue_filled) == 6


def test_gradients_reach_heads_betas_and_regressors_but_not_the_ema_model():
    model = _model()
    ema = copy.deepcopy(model)
    for param in ema.parameters():
        param.requires_grad_(False)
    diva = _diva(model)
    diva.enqueue(F.normalize(torch.randn(6, 5), dim=1))
    terms = diva(_step(model, LABELS, ema=ema))
    sum(terms.values()).backward()
    for name in HEADS:
        assert model.head.heads[name].weight.grad.abs().sum() > 0, name
    assert diva.shared_loss.beta.grad is not None and diva.intra_loss.beta.grad is not None
    assert all(p.grad is not None for p in diva.regressors.parameters())
    assert all(p.grad is None for p in ema.parameters())


def test_parameter_groups_and_ema_momentum():
    model = _model()
    diva = _diva(model, momentum=0.95, beta_lr_mult=50.0)
    groups = {g["name"]: g for g in diva.optimizer_param_groups()}
    assert set(groups) == {"diva_beta", "diva_regressors"}
    assert groups["diva_beta"]["lr_mult"] == 50.0 and groups["diva_beta"]["weight_decay"] == 0.0
    assert groups["diva_regressors"]["weight_decay"] == 0.0
    assert len(groups["diva_beta"]["params"]) == 2
    assert {id(p) for p in groups["diva_regressors"]["params"]} == {id(p) for p in diva.regressors.parameters()}
    assert diva.ema_momentum == 0.95
    # One regressor per direction, from the source head's size to the discriminative head's size.
    assert diva.regressors["shared"][0].in_features == 6 and diva.regressors["intra"][2].out_features == 8


def test_factory_builds_two_margin_losses_and_the_distance_weighted_shared_miner():
    diva = _diva(_model(), margin=0.3, beta=0.8, learn_beta=False, margin_normalizer="triplets", lower_cutoff=0.6)
    margin_type = type(dmlplug.create("loss", "margin", num_classes=4))
    assert diva.shared_loss is not diva.intra_loss
    for loss in (diva.shared_loss, diva.intra_loss):
        assert type(loss) is margin_type
        assert (loss.margin, loss.normalizer, loss.nu) == (0.3, "triplets", 0.0)
        assert loss.beta.tolist() == pytest.approx([0.8] * 4) and not isinstance(loss.beta, nn.Parameter)
    inner = diva.shared_miner.inner
    assert type(inner) is type(dmlplug.create("miner", "distance_weighted"))
    assert (inner.lower_cutoff, inner.upper_cutoff, inner.anchors) == (0.6, None, "with_positive")
    # Fixed betas: no beta group; checkpoint keys as before (the betas are buffers of the two losses).
    assert {g["name"] for g in diva.optimizer_param_groups()} == {"diva_regressors"}
    assert {"shared_loss.beta", "intra_loss.beta", "queue", "queue_filled"} <= set(diva.state_dict())


def test_partial_batches_missing_views_and_missing_heads_are_rejected():
    model = _model()
    diva = _diva(model, batch_size=8)
    with pytest.raises(RunError, match="full batches"):
        diva(_step(model, LABELS))
    diva = _diva(model)
    step = _step(model, LABELS)
    step.views = []
    with pytest.raises(RunError, match="second augmented view"):
        diva(step)
    step = _step(model, LABELS)
    step.named_embeddings = {"discriminative": step.named_embeddings["discriminative"]}
    with pytest.raises(RunError, match="named embedding"):
        diva(step)
    # With alpha_ssl = 0 neither views nor an EMA model are needed.
    step = _step(model, LABELS)
    step.views, step.ema_model = [], None
    assert "selfsim" not in _diva(model, alpha_ssl=0.0)(step)


def test_factory_rejects_a_head_without_the_named_heads():
    linear = dmlplug.create("head", "linear", feature_dim=12, embedding_size=8)
    with pytest.raises(ComponentError, match="multi-head"):
        dmlplug.create("regularizer", "diva", head=linear, num_classes=4, batch_size=6)
    model = _model()
    with pytest.raises(ComponentError, match="intra"):
        dmlplug.create("regularizer", "diva", head=model.head, num_classes=4, intra_head="within")
    with pytest.raises(RecipeError, match="rho has 2 values for 3"):  # the parameters reject it, as validate does
        dmlplug.create("regularizer", "diva", head=model.head, num_classes=4, rho=[1.0, 2.0])


def test_recipe_needs_views_ema_and_named_embeddings_only_while_the_moco_term_is_on():
    recipe = tomllib.loads((ROOT / "recipes" / "glyphs_diva.toml").read_text())
    needs = load_recipe(recipe).needs
    assert needs.views == 2 and "ema" in needs and "named_embeddings" in needs
    recipe["regularizers"][0]["alpha_ssl"] = 0.0
    needs = load_recipe(recipe).needs
    assert needs.views == 1 and "ema" not in needs and "named_embeddings" in needs
    # A head without named embeddings is rejected before anything is built.
    recipe["head"] = {"name": "linear", "embedding_size": 32}
    recipe["loss"].pop("embedding")
    with pytest.raises(RecipeError, match="named embeddings"):
        load_recipe(recipe)


def test_eval_embedding_is_the_weighted_concatenation():
    model = _model(weights=[0.5, 1.5, 1.0, 2.0])
    images = torch.randn(3, 3, 2, 2)
    out = model(images)
    parts = [w * out.named[n] for w, n in zip([0.5, 1.5, 1.0, 2.0], HEADS, strict=True)]
    concat = torch.cat(parts, dim=1)
    expected = concat / concat.norm(dim=1, keepdim=True)
    assert out.embedding.shape == (3, sum(HEADS.values()))
    assert torch.allclose(out.embedding, expected, atol=1e-6)
    # Each named embedding is unit-norm, so the squared norm of the concatenation is sum(w²).
    assert torch.allclose(concat.norm(dim=1) ** 2, torch.full((3,), 0.25 + 2.25 + 1 + 4), atol=1e-5)
