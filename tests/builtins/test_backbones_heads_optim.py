"""timm backbones (pooling, frozen BN, local weights, warm-up), heads, optimizer groups and schedules."""

import pytest
import torch

import dmlplug
from dmlplug.errors import ComponentError, RecipeError


def backbone(**params):
    return dmlplug.create("backbone", "timm", **{"model": "resnet10t", **params})


def test_pooling_variants_match_their_definition():
    torch.manual_seed(0)
    images = torch.randn(2, 3, 64, 64)
    avg, fmap = backbone(pool="avg").eval()(images)
    torch.manual_seed(0)
    b = backbone(pool="avgmax").eval()
    both, fmap2 = b(images)
    assert avg.shape == (2, b.num_features) and fmap.dim() == 4
    torch.testing.assert_close(both, fmap2.mean((2, 3)) + fmap2.amax((2, 3)))
    mx, fmap3 = backbone(pool="max").eval()(images)
    torch.testing.assert_close(mx, fmap3.amax((2, 3)))


def test_frozen_bn_keeps_running_statistics_but_trains_affine_parameters():
    b = backbone(frozen_bn=True)
    b.train()
    bns = [m for m in b.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bns and all(not m.training for m in bns)
    before = bns[0].running_mean.clone()
    b(torch.randn(4, 3, 32, 32) * 5 + 3)
    torch.testing.assert_close(bns[0].running_mean, before)
    assert bns[0].weight.requires_grad
    unfrozen = backbone(frozen_bn=False).train()
    assert all(m.training for m in unfrozen.modules() if isinstance(m, torch.nn.BatchNorm2d))


def test_pretrained_weights_from_a_local_file(tmp_path):
    torch.manual_seed(1)
    source = backbone()
    path = tmp_path / "w.pth"
    torch.save({"state_dict": source.body.state_dict(), **{}}, path)
    loaded = backbone(pretrained=str(path))
    for (name, a), (_, b) in zip(source.body.state_dict().items(), loaded.body.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
    with pytest.raises(ComponentError, match="not found.*never downloads|never downloads"):
        backbone(pretrained=str(tmp_path / "missing.pth"))
    torch.save({"unrelated.weight": torch.zeros(3)}, tmp_path / "bad.pth")
    with pytest.raises(ComponentError, match="does not match model"):
        backbone(pretrained=str(tmp_path / "bad.pth"))


def test_unknown_timm_model_suggests():
    with pytest.raises(ComponentError, match="did you mean"):
        backbone(model="resnet5O")


def test_heads_normalise_and_multi_head_concatenates_with_weights():
    feats = torch.randn(5, 32)
    lin = dmlplug.create("head", "linear", embedding_size=8, feature_dim=32)
    assert lin.embedding_size == 8
    torch.testing.assert_close(lin(feats).norm(dim=1), torch.ones(5))
    mlp = dmlplug.create("head", "mlp", embedding_size=6, hidden=[16, 16], feature_dim=32)
    assert mlp(feats).shape == (5, 6)
    multi = dmlplug.create("head", "multi", heads={"a": 4, "b": 3}, weights=[2.0, 1.0], feature_dim=32)
    out = multi(feats)
    emb = multi.eval_embedding(out)
    expected = torch.nn.functional.normalize(torch.cat([2 * out["a"], out["b"]], 1), dim=1)
    torch.testing.assert_close(emb, expected)
    assert multi.embedding_size == 7


def test_optimizer_groups_overrides_and_component_defaults():
    from dmlplug.engine.optim import build_optimizer, collect_groups
    from dmlplug.recipe import OptimizerSection

    class WithGroups(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.flow = torch.nn.Linear(2, 2)

        def optimizer_param_groups(self):
            return [{"name": "flow", "params": list(self.flow.parameters()), "lr_mult": 50.0, "weight_decay": 0.0}]

    backbone_mod, head, loss = torch.nn.Linear(3, 3), torch.nn.Linear(3, 2), torch.nn.Linear(1, 1)
    shared = torch.nn.Module()
    shared.again = head  # a parameter reachable twice stays in its first group
    groups = collect_groups([("backbone", backbone_mod), ("head", head), ("loss", loss), ("reg", WithGroups()),
                             ("shared", shared)])
    assert [g.name for g in groups] == ["backbone", "head", "loss", "flow"]
    section = OptimizerSection.model_validate(
        {"name": "sgd", "lr": 0.1, "weight_decay": 1e-4, "groups": {"loss": {"lr": 0.5}, "head": {"lr_mult": 2}}})
    opt = build_optimizer(groups, section)
    by_name = {g["name"]: g for g in opt.param_groups}
    assert by_name["backbone"]["lr"] == 0.1 and by_name["backbone"]["weight_decay"] == 1e-4
    assert by_name["head"]["lr"] == pytest.approx(0.2)
    assert by_name["loss"]["lr"] == 0.5
    assert by_name["flow"]["lr"] == pytest.approx(5.0) and by_name["flow"]["weight_decay"] == 0.0
    with pytest.raises(RecipeError, match="no parameter group of that name"):
        build_optimizer(groups, OptimizerSection.model_validate({"groups": {"los": {"lr": 1}}}))
    with pytest.raises(Exception, match="either lr or lr_mult"):
        OptimizerSection.model_validate({"groups": {"loss": {"lr": 1, "lr_mult": 2}}})


@pytest.mark.parametrize(
    ("sched", "expected"),
    [
        ({"name": "step", "step_size": 2, "gamma": 0.5}, [1.0, 1.0, 0.5, 0.5, 0.25]),
        ({"name": "multistep", "milestones": [1, 3], "gamma": 0.1}, [1.0, 0.1, 0.1, 0.01, 0.01]),
        ({"name": "cosine", "warmup_epochs": 1}, None),
    ],
)
def test_schedules(sched, expected):
    from dmlplug.engine.optim import build_scheduler
    from dmlplug.recipe import SchedulerSection

    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=1.0)
    scheduler = build_scheduler(opt, SchedulerSection.model_validate(sched), epochs=5)
    lrs = []
    for _ in range(5):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    if expected is not None:
        assert lrs == pytest.approx(expected)
    else:  # warm-up from half the lr, then a cosine decay towards 0
        assert lrs[0] == pytest.approx(0.5) and lrs[1] == pytest.approx(1.0)
        assert lrs[1] > lrs[2] > lrs[3] > lrs[4] > 0


def test_backbone_warmup_freezes_then_releases(tmp_path):
    from e2e import TINY_RECIPE

    path = tmp_path / "r.toml"
    path.write_text(TINY_RECIPE.replace('model = "resnet10t"', 'model = "resnet10t"\nwarmup_epochs = 1'))
    seen = []

    class Spy:
        @dmlplug.hookimpl
        def on_epoch_start(self, run, epoch):
            seen.append(None)

        @dmlplug.hookimpl
        def on_step_end(self, run, step, losses):
            seen[-1] = (run.epoch, run.model.backbone_frozen,
                        next(run.model.backbone.parameters()).requires_grad)

    from dmlplug.plugins import get_host

    host = get_host()
    host.register_run_plugin(Spy(), "spy")
    try:
        dmlplug.run(path, overrides=["run.epochs=2"], out=tmp_path / "run", quiet=True)
    finally:
        host.unregister_run_plugin("spy")
    assert seen == [(1, True, False), (2, False, True)]


def test_create_builds_registered_components_by_kind_and_name():
    loss = dmlplug.create("loss", "arcface", num_classes=5, embedding_size=8)
    assert loss.W.shape == (8, 5)
    miner = dmlplug.create("miners", "batch_hard")
    assert miner is not None
