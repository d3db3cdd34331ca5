"""The timm backbone: pooling, frozen BN, local weights, model names, and the backbone warm-up of a run."""

import pytest
import torch

import dmlplug
from dmlplug.errors import ComponentError, RecipeError
from dmlplug.protocols import Backbone
from dmlplug_builtins.backbones.timm_backbone import TimmBackbone


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
    with pytest.raises(RecipeError, match="weights file not found"):  # refused when the parameters validate
        backbone(pretrained=str(tmp_path / "missing.pth"))
    torch.save({"unrelated.weight": torch.zeros(3)}, tmp_path / "bad.pth")
    with pytest.raises(ComponentError, match="does not match model"):
        backbone(pretrained=str(tmp_path / "bad.pth"))
    # Same keys, other shapes (another width of the architecture): the same error, naming the file.
    other = dmlplug.create("backbone", "timm", model="resnet18")
    torch.save(other.body.state_dict(), tmp_path / "resnet18.pth")
    with pytest.raises(ComponentError, match=r"weights file .*resnet18\.pth does not match model"):
        backbone(pretrained=str(tmp_path / "resnet18.pth"))


def test_pretrained_weights_from_a_local_safetensors_file(tmp_path):
    from safetensors.torch import save_file

    torch.manual_seed(2)
    source = backbone()
    save_file(source.body.state_dict(), str(tmp_path / "w.safetensors"))
    loaded = backbone(pretrained=str(tmp_path / "w.safetensors"))
    for name, value in source.body.state_dict().items():
        torch.testing.assert_close(loaded.body.state_dict()[name], value, msg=name)


def test_unknown_timm_model_suggests():
    # Rejected with the parameters (from the stored timm names), before the factory runs.
    with pytest.raises(RecipeError, match="did you mean 'resnet50'"):
        backbone(model="resnet5O")


def test_the_factory_checks_timm_itself_when_the_stored_names_cannot_judge():
    # E.g. timm missing at validation time: the Params let the name through, the factory asks timm.
    from dmlplug_builtins.backbones import TimmParams, build_timm

    with pytest.raises(ComponentError, match="did you mean"):
        build_timm(TimmParams.model_construct(model="resnet5O"), ctx=None)


def test_the_backbone_is_a_module_level_class_with_its_state_dict_keys():
    b = backbone()
    assert isinstance(b, TimmBackbone) and isinstance(b, Backbone)
    # Checkpoints store the timm model under "body.": the prefix is part of the run directory's format.
    assert all(key.startswith("body.") for key in b.state_dict())


def test_feature_map_tag_follows_the_model_name():
    from dmlplug_builtins.backbones import TimmParams

    assert TimmParams(model="resnet10t").extra_tags() == ("feature_map",)
    assert TimmParams(model="vit_tiny_patch16_224").extra_tags() == ()


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


def test_validate_refuses_a_missing_weights_file_before_any_run(tmp_path):
    from e2e import TINY_RECIPE, run_cli

    recipe = tmp_path / "r.toml"
    recipe.write_text(TINY_RECIPE)
    proc = run_cli("validate", recipe, "--set", "backbone.pretrained=weights/missing.pth", cwd=tmp_path)
    assert proc.returncode == 2 and "pretrained weights file not found: weights/missing.pth" in proc.stderr
    assert "Traceback" not in proc.stderr
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "missing.pth").write_bytes(b"")  # there now: validate does not read it
    assert run_cli("validate", recipe, "--set", "backbone.pretrained=weights/missing.pth", cwd=tmp_path).returncode == 0
