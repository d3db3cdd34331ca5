"""ViT backbones: layer-wise learning rates, the input size a ViT is built for, its weights' input statistics,
and the ViT recipes (built at their image size, the embedded-dataset variant run for a few steps)."""

import tomllib

import pytest
import torch
from e2e import ROOT

import dmlplug
from dmlplug.engine.optim import collect_groups, param_groups
from dmlplug.errors import ComponentError, RecipeError
from dmlplug.recipe.schema import OptimizerOptions
from dmlplug.testing.fixtures import expect_groups_declared

VIT_RECIPES = sorted((ROOT / "recipes").glob("*_vit_*.toml"))


def test_the_vit_recipes_are_the_six_benchmark_recipes_and_select_on_validation_classes():
    assert [r.stem for r in VIT_RECIPES] == [f"{d}_vit_{m}" for d in ("cars", "cub", "sop")
                                             for m in ("b16_in21k", "dinov2_s14")]
    for path in [*VIT_RECIPES, ROOT / "recipes" / "glyphs_vit.toml"]:
        recipe = tomllib.loads(path.read_text())
        dataset = recipe["data"]["dataset"]
        assert recipe["evaluation"]["select_on"] == "val", path.name  # never "auto" (never the test split)
        assert dataset.get("val_classes", dataset.get("val_fraction", 0)) > 0, path.name


def test_layer_decay_gives_each_block_its_rate():
    backbone = dmlplug.create("backbone", "timm", model="vit_tiny_patch16_224", img_size=32, layer_decay=0.5)
    groups = collect_groups([("backbone", backbone), ("head", torch.nn.Linear(192, 8))])
    options = OptimizerOptions.model_validate({"lr": 1e-3, "groups": {"head": {"lr": 0.1}}})
    lrs = {g["name"]: g["lr"] for g in param_groups(groups, options)}
    # 12 blocks: the stem is layer 0, block i layer i + 1; layer N trains at lr * 0.5^(12 - N).
    expected = {"backbone.layer0": 1e-3 * 0.5 ** 12, **{f"backbone.layer{i + 1}": 1e-3 * 0.5 ** (11 - i)
                                                        for i in range(12)}, "head": 0.1}
    assert lrs == pytest.approx(expected)
    names = {id(p): n for n, p in backbone.body.named_parameters()}
    members = {g.name: {names.get(id(p)) for p in g.params} for g in groups}
    assert members["backbone.layer0"] == {"cls_token", "pos_embed", "patch_embed.proj.weight",
                                          "patch_embed.proj.bias"}
    assert all(name.startswith("blocks.3.") for name in members["backbone.layer4"])
    assert {"norm.weight", "norm.bias"} < members["backbone.layer12"]  # the final norm joins the last block
    # [optimizer.groups.backbone] sets the top layer's rate; the layers below keep their decay.
    options = OptimizerOptions.model_validate({"lr": 1e-3, "groups": {"backbone": {"lr": 1e-4}}})
    lrs = {g["name"]: g["lr"] for g in param_groups(groups, options)}
    assert lrs["backbone.layer12"] == pytest.approx(1e-4) and lrs["backbone.layer11"] == pytest.approx(5e-5)


def test_the_layer_groups_are_declared_under_the_backbones_name():
    params = dmlplug.validate({"data": {"dataset": {"name": "glyphs"}}, "loss": {"name": "triplet"},
                               "backbone": {"name": "timm", "model": "resnet10t", "layer_decay": 0.8}})
    backbone = dmlplug.create("backbone", "timm", model="resnet10t", layer_decay=0.8)
    expect_groups_declared("backbone 'timm'", backbone, params.components["backbone"].params, "backbone")
    assert len(backbone.optimizer_param_groups()) == 5  # a CNN too: stem, then its four stages


def test_layer_decay_outside_zero_to_one_is_refused():
    with pytest.raises(RecipeError, match="layer_decay"):
        dmlplug.create("backbone", "timm", model="resnet10t", layer_decay=1.5)


def test_a_vit_built_for_another_size_than_the_data_is_stopped_at_build_with_the_fix():
    with pytest.raises(ComponentError, match=r"built for 518×518 inputs, but \[data\] image_size is 28") as info:
        dmlplug.create("backbone", "timm", model="vit_small_patch14_dinov2", image_size=28)
    assert 'img_size = "data"' in info.value.fix
    backbone = dmlplug.create("backbone", "timm", model="vit_small_patch14_dinov2", img_size="data", image_size=28)
    features, feature_map = backbone(torch.randn(2, 3, 28, 28))
    assert features.shape == (2, 384) and feature_map is None


def test_img_size_is_refused_for_a_model_without_one():
    with pytest.raises(ComponentError, match="'resnet10t' takes no img_size"):
        dmlplug.create("backbone", "timm", model="resnet10t", img_size=32)
    for bad in (True, 4):
        with pytest.raises(RecipeError, match="img_size is a side length"):
            dmlplug.create("backbone", "timm", model="vit_tiny_patch16_224", img_size=bad)


def test_weights_trained_on_other_statistics_get_their_input_renormalised(tmp_path):
    """augreg ViTs were trained on (v - 0.5) / 0.5: the ImageNet-normalised input is turned into that."""
    from dmlplug.data.transforms import IMAGENET_MEAN, IMAGENET_STD

    torch.manual_seed(0)
    source = dmlplug.create("backbone", "timm", model="vit_tiny_patch16_224", img_size=32)
    torch.save(source.body.state_dict(), tmp_path / "w.pth")
    tagged = dict(model="vit_tiny_patch16_224.augreg_in21k", img_size=32, pretrained=str(tmp_path / "w.pth"))
    backbone = dmlplug.create("backbone", "timm", **tagged).eval()
    raw = torch.rand(2, 3, 32, 32)
    pipeline = (raw - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        expected = backbone.body.forward_features((raw - 0.5) / 0.5).mean(1)
        torch.testing.assert_close(backbone(pipeline)[0], expected, rtol=1e-4, atol=1e-5)
    assert dmlplug.create("backbone", "timm", **tagged, input_norm="imagenet").shift is None
    assert dmlplug.create("backbone", "timm", model="vit_tiny_patch16_224.augreg_in21k", img_size=32).shift is None


@pytest.mark.parametrize("model", sorted({tomllib.loads(r.read_text())["backbone"]["model"] for r in VIT_RECIPES}))
def test_each_vit_recipes_backbone_takes_its_image_size(model):
    """Built as the recipes build it (random weights, shapes only: the meta device), at their [data] image_size."""
    recipe = next(tomllib.loads(r.read_text()) for r in VIT_RECIPES if model in r.read_text())
    table = {k: v for k, v in recipe["backbone"].items() if k not in ("name", "pretrained")}
    size = recipe["data"]["image_size"]
    with torch.device("meta"):
        backbone = dmlplug.create("backbone", "timm", **table, image_size=size)
        features, _ = backbone(torch.empty(1, 3, size, size))
    assert features.shape == (1, backbone.num_features)


def test_the_embedded_vit_recipe_trains_a_few_steps_on_the_cpu_with_layer_wise_rates(tmp_path):
    class Rates:
        seen: dict = {}

        @dmlplug.hookimpl
        def on_step_end(self, run, step, losses):
            self.seen = dict(run.learning_rates)

    rates = Rates()
    tiny = {"run.epochs": 1, "run.device": "cpu", "data.batch_size": 16, "data.dataset.num_classes": 30,
            "data.dataset.images_per_class": 8, "evaluation.pictures": False, "evaluation.initial": False}
    result = dmlplug.run(ROOT / "recipes" / "glyphs_vit.toml", overrides=tiny, out=tmp_path / "run", quiet=True,
                         hooks=[rates])
    assert result.status == "completed" and result.selected_on == "val" and result.best_epoch == 1
    assert "recall@1" in result.best_metrics
    lrs = rates.seen
    assert set(lrs) == {f"backbone.layer{n}" for n in range(13)} | {"head"}
    for n in range(12):
        assert lrs[f"backbone.layer{n}"] == pytest.approx(0.75 * lrs[f"backbone.layer{n + 1}"])
