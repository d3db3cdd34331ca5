"""`dmlplug validate` catches what a run would otherwise find only after building everything (issue 15, item 1).

Each mistake gets a recipe that fails validation with what / where / fix, next to the good form that passes.
"""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
from pydantic import Field

import dmlplug
from dmlplug import Params
from dmlplug.errors import RecipeError, RunError
from dmlplug.evaluation import knn
from dmlplug.knn_backends import KNN_BACKENDS
from dmlplug.recipe import load_recipe
from dmlplug.recipe.schema import EvaluationSection
from dmlplug.registry import Registry

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "recipes" / "quickstart.toml"


def _fails(overrides: list[str], *phrases: str, recipe: Path | dict = QUICKSTART) -> RecipeError:
    with pytest.raises(RecipeError) as info:
        dmlplug.validate(recipe, overrides=overrides)
    text = str(info.value)
    for phrase in phrases:
        assert phrase in text, text
    return info.value


@pytest.mark.parametrize("recipe", sorted(p for p in (ROOT / "recipes").rglob("*.toml")
                                           # search spaces and sweep files: tests/tune
                                           if not p.name.endswith((".space.toml", ".sweep.toml"))),
                         ids=lambda p: p.relative_to(ROOT / "recipes").as_posix())
def test_every_shipped_recipe_still_validates(recipe, monkeypatch, tmp_path):
    monkeypatch.setenv("DMLPLUG_DATA", str(tmp_path))
    dmlplug.validate(recipe)


# ------------------------------------------------------------------------------------------------ kNN backends


def test_knn_backends_are_one_list_for_schema_docs_and_search():
    assert typing.get_args(EvaluationSection.model_fields["backend"].annotation) == KNN_BACKENDS
    assert knn.BACKENDS == KNN_BACKENDS
    assert "faiss-gpu" in KNN_BACKENDS
    row = next(line for line in (ROOT / "docs" / "recipes.md").read_text().splitlines()
               if line.startswith("| `backend` |"))
    assert all(name in row for name in KNN_BACKENDS), row


@pytest.mark.parametrize("backend", KNN_BACKENDS)
def test_every_backend_the_search_accepts_validates(backend):
    recipe = dmlplug.validate(QUICKSTART, overrides=[f'evaluation.backend="{backend}"'])
    assert recipe.recipe.evaluation.backend == backend


def test_a_backend_the_search_rejects_fails_validate():
    _fails(['evaluation.backend="faiss"'], "evaluation.backend", "'faiss-cpu'", "'faiss-gpu'", "quickstart.toml")
    with pytest.raises(RunError, match="did you mean 'faiss-cpu'"):
        knn.resolve_backend("faiss-cpus", on_cuda=False)


# ------------------------------------------------------------------------------------------------ selection metric


def test_misspelt_selection_metric_fails_with_a_suggestion():
    error = _fails(['evaluation.metric="recal@1"'], "'recal@1'", "did you mean 'recall@1'")
    assert "[evaluation] metric" in error.where and "recall@1" in error.fix


def test_selection_metric_of_any_evaluator_validates():
    dmlplug.validate(QUICKSTART, overrides=['evaluation.metric="map@r"'])
    _fails(['evaluation.metric="recall@16"'], "'recall@16'")
    dmlplug.validate(QUICKSTART, overrides=['evaluation.metric="recall@16"', "evaluators.0.k=[1, 16]"])


def test_metric_of_an_evaluator_not_in_the_recipe_fails():
    # nmi is a real metric, but no evaluator of this recipe produces it.
    _fails(['evaluation.metric="nmi"'], "'nmi'", "recall, map_at_r")


class _KParams(Params):
    k: list[int] = Field(default_factory=lambda: [1], description="k")

    def metric_names(self) -> tuple[str, ...]:
        return tuple(f"recall@{k}" for k in self.k)


def _toy_registry(extra_evaluator_params: type[Params] | None = None) -> Registry:
    reg = Registry()
    f = lambda params, ctx: None  # noqa: E731
    reg.register_callback("datasets", "t")("toy", f)
    reg.register_callback("samplers", "t")("random", f)
    reg.register_callback("backbones", "t")("timm", f)
    reg.register_callback("heads", "t")("linear", f)
    reg.register_callback("losses", "t")("triplet", f)
    reg.register_callback("evaluators", "t")("recall", f, params=_KParams)
    reg.register_callback("evaluators", "t")("third_party", f, params=extra_evaluator_params)
    reg.register_callback("loggers", "t")("console", f)
    reg.register_callback("optimizers", "t")("adam", f)  # the defaults of [optimizer] and [scheduler]
    reg.register_callback("lr_schedules", "t")("none", f)
    return reg


def _toy_recipe(*evaluators: str, metric: str, **sections: dict) -> dict:
    return {"data": {"dataset": {"name": "toy"}, "sampler": {"name": "random"}}, "backbone": {"name": "timm"},
            "loss": {"name": "triplet"}, "evaluators": [{"name": e} for e in evaluators],
            "loggers": [{"name": "console"}], "evaluation": {"metric": metric}, **sections}


def test_an_evaluator_that_declares_nothing_does_not_switch_the_check_off():
    # One undeclared evaluator used to skip the check for the whole recipe; now it declares no metric
    # (Params' default) and the message names it, so its author knows what to declare.
    load_recipe(_toy_recipe("recall", "third_party", metric="recall@1"), registry=_toy_registry())
    with pytest.raises(RecipeError, match="'their_metric'") as info:
        load_recipe(_toy_recipe("recall", "third_party", metric="their_metric"), registry=_toy_registry())
    assert "evaluator 'third_party' (plugin 't')" in info.value.fix and "metric_names()" in info.value.fix


# ------------------------------------------------------------------------------------------------ validation split


#: The quickstart without its validation classes.
NO_VAL = ["data.dataset.val_fraction=0"]


def test_val_split_without_validation_classes_fails():
    error = _fails([*NO_VAL, 'evaluation.select_on="val"'], 'select_on = "val"', "'glyphs'", "val_fraction")
    assert "[evaluation]" in error.where
    _fails([*NO_VAL, 'evaluation.split="val"'], 'select_on = "val"')  # the former name of the key means the same
    _fails([*NO_VAL, 'evaluation.report_on="val"'], 'report_on = "val"')


def test_val_split_with_validation_classes_validates():
    dmlplug.validate(QUICKSTART, overrides=['evaluation.select_on="val"', "data.dataset.val_fraction=0.2"])


@pytest.mark.parametrize(("val_classes", "expected"), [(0, False), (0.2, True), (10, True)])
def test_file_datasets_know_their_validation_split(val_classes, expected):
    recipe = {"data": {"dataset": {"name": "cub200", "root": "/nowhere", "val_classes": val_classes}},
              "backbone": {"name": "timm", "model": "resnet18"}, "loss": {"name": "triplet_margin"},
              "evaluation": {"split": "val"}}
    if expected:
        dmlplug.validate(recipe)
    else:
        _fails([], 'select_on = "val"', "'cub200'", recipe=recipe)


def test_a_csv_list_may_hold_val_rows_so_validate_leaves_it_to_the_run():
    recipe = {"data": {"dataset": {"name": "csv", "root": "/nowhere"}}, "backbone": {"name": "timm"},
              "loss": {"name": "triplet_margin"}, "evaluation": {"split": "val"}}
    dmlplug.validate(recipe)


def test_run_checks_the_val_split_after_the_dataset_and_before_the_model(monkeypatch, tmp_path):
    from dmlplug.engine import build
    from dmlplug.plugins import get_host

    recipe = dmlplug.validate(QUICKSTART, overrides=["data.dataset.num_classes=60", "data.dataset.images_per_class=4",
                                                    "data.dataset.image_size=16", "data.batch_size=8", *NO_VAL])
    # What validate cannot know (a CSV list without 'val' rows) is simulated by changing the split afterwards.
    recipe.recipe.evaluation.select_on = "val"
    monkeypatch.setenv("DMLPLUG_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(build, "build_model", lambda *a, **k: calls.append("model"))
    ctx = build.new_context(recipe, device="cpu", host=get_host())
    with pytest.raises(RunError, match='select_on = "val", but dataset .* has no validation split'):
        build.build_components(recipe, ctx)
    assert calls == []


# ------------------------------------------------------------------------------------------------ batch size


@pytest.mark.parametrize(("sampler", "phrase"), [
    (["data.sampler.m=5"], "use batch_size = 60 or 65"),
    (['data.sampler={name = "class_random", k = 3}'], "use batch_size = 63 or 66"),
    # Not 3: one class of 3 per batch gives a pair loss no negative (check_classes_per_batch refuses it).
    (["data.batch_size=2", "data.sampler.m=3"], "use batch_size = 6"),
    (["data.batch_size=6"], "use batch_size = 8,"),  # m = 4: not 4 either
])
def test_batch_size_not_a_multiple_of_the_sampler_group_fails(sampler, phrase):
    error = _fails(sampler, "is not a multiple", phrase)
    assert "[data] batch_size" in error.where


def test_hierarchical_sampler_batch_size_is_a_multiple_of_its_classes_per_batch():
    sop = ROOT / "recipes" / "sop_arcface_tcm.toml"  # SOP has the super-class labels the sampler needs
    sampler = 'data.sampler={name = "hierarchical", m = 4, super_classes_per_batch = 5}'
    _fails([sampler], "batch_size = 384 is not a multiple of 20", "use batch_size = 380 or 400", recipe=sop)
    dmlplug.validate(sop, overrides=[sampler, "data.batch_size=400"])


def test_batch_size_that_divides_validates():
    dmlplug.validate(QUICKSTART, overrides=["data.sampler.m=8"])
    dmlplug.validate(QUICKSTART, overrides=["data.sampler.m=5", "data.batch_size=60"])
    dmlplug.validate(QUICKSTART, overrides=['data.sampler={name = "random"}', "data.batch_size=63"])


# ------------------------------------------------------------------------------------------------ optimizer groups


class _GroupParams(Params):
    def optimizer_group_names(self, section: str) -> tuple[str, ...]:
        return (section, "beta")


def _group_registry(loss_params: type[Params] | None) -> Registry:
    reg = _toy_registry()
    f = lambda params, ctx: None  # noqa: E731
    reg.register_callback("losses", "t")("margin", f, params=loss_params)

    class Declared(Params):
        def optimizer_group_names(self, section: str) -> tuple[str, ...]:
            return (section,)

    reg.register_callback("backbones", "t")("declared", f, params=Declared)
    reg.register_callback("heads", "t")("declared", f, params=Declared)
    return reg


def _group_recipe(*groups: str) -> dict:
    return _toy_recipe("recall", metric="recall@1", backbone={"name": "declared"}, head={"name": "declared"},
                       loss={"name": "margin"}, optimizer={"groups": {g: {"lr_mult": 2.0} for g in groups}})


def test_unknown_optimizer_group_fails_with_a_suggestion():
    registry = _group_registry(_GroupParams)
    load_recipe(_group_recipe("backbone", "beta", "loss"), registry=registry)
    with pytest.raises(RecipeError, match=r"optimizer.groups.bakbone.*did you mean 'backbone'") as info:
        load_recipe(_group_recipe("bakbone"), registry=registry)
    assert "backbone, head, loss, beta" in info.value.fix
    assert "[optimizer.groups.bakbone]" in info.value.where


def test_a_component_that_declares_no_groups_is_judged_by_the_engine_default():
    # The engine gives a component without optimizer_param_groups() one group named after its section.
    registry = _group_registry(None)
    load_recipe(_group_recipe("loss", "backbone"), registry=registry)
    with pytest.raises(RecipeError, match=r"optimizer.groups.whatever") as info:
        load_recipe(_group_recipe("whatever"), registry=registry)
    assert info.value.fix == "groups of this recipe: backbone, head, loss"


def test_built_in_backbone_and_head_declare_their_group():
    recipe = dmlplug.validate(QUICKSTART)
    assert recipe.components["backbone"].params.optimizer_group_names("backbone") == ("backbone",)
    assert recipe.components["head"].params.optimizer_group_names("head") == ("head",)


# ------------------------------------------------------------------------------------------------ multi head weights


def test_multi_head_weights_are_checked_by_validate():
    diva = ROOT / "recipes" / "glyphs_diva.toml"
    _fails(["head.weights=[1.0, 1.0]"], "2 weights for 4 heads", "discriminative", recipe=diva)
    _fails(["head.weights=[0.0, 0.0, 0.0, 0.0]"], "at least one weight must be > 0", recipe=diva)
    _fails(["head.weights=[1.0, -1.0, 1.0, 1.0]"], "finite number >= 0", recipe=diva)
    dmlplug.validate(diva, overrides=["head.weights=[1.0, 0.5, 0.0, 1.0]"])


# ------------------------------------------------------------------------------------------------ timm model names


def test_unknown_timm_model_fails_with_a_suggestion():
    _fails(['backbone.model="resnet5"'], "unknown timm model 'resnet5'", "did you mean 'resnet50'", "backbone")


@pytest.mark.parametrize("model", ["resnet50", "resnet50.a1_in1k", "vit_small_patch16_224", "hf-hub:timm/anything"])
def test_timm_names_and_tags_validate(model):
    recipe = dmlplug.validate(QUICKSTART, overrides=[f'backbone.model="{model}"'])
    assert recipe.components["backbone"].params.pretrained is False  # the weights flag is untouched


GLYPH_RECIPES = ["quickstart", "glyphs_arcface_tcm", "glyphs_proxyanchor_nir", "glyphs_diva", "glyphs_s2sd"]


@pytest.mark.parametrize("name", GLYPH_RECIPES)
def test_built_in_components_declare_every_group_they_build(name, tmp_path):
    """What validate knows of the groups covers what the engine builds, so the check is on for shipped recipes."""
    from dmlplug.engine.assembly import trainable_groups
    from dmlplug.engine.build import build_components, new_context
    from dmlplug.plugins import get_host
    from dmlplug.recipe.checks import optimizer_group_names

    overrides = ["data.dataset.num_classes=40", "data.dataset.images_per_class=8"]
    recipe = dmlplug.validate(ROOT / "recipes" / f"{name}.toml", overrides=overrides)
    declared = optimizer_group_names(recipe)
    assert declared is not None, "a built-in trainable component does not declare its optimizer groups"
    components = build_components(recipe, new_context(recipe, device="cpu", host=get_host(), run_dir=tmp_path))
    built = {group.name for group in trainable_groups(components)}
    assert built <= set(declared), f"built groups {built - set(declared)} are not declared"


def test_a_misspelled_group_of_a_shipped_recipe_fails_validate():
    with pytest.raises(RecipeError, match=r"optimizer.groups.bta.*did you mean 'beta'"):
        dmlplug.validate(ROOT / "recipes" / "glyphs_diva.toml", overrides=["optimizer.groups.bta.lr_mult=2.0"])


# ------------------------------------------------------------------------------------------------ DiVA's heads


def test_diva_head_name_that_the_multi_head_lacks_fails_with_a_suggestion():
    error = _fails(['regularizers.0.intra_head="intr"'], "regularizers[0].intra_head", "did you mean 'intra'",
                   recipe=ROOT / "recipes" / "glyphs_diva.toml")
    assert "regularizers[0].intra_head" in error.where and "discriminative" in error.fix


def test_diva_head_names_follow_the_heads_table():
    import tomllib

    recipe = ROOT / "recipes" / "glyphs_diva.toml"
    raw = tomllib.loads(recipe.read_text())
    heads = raw["head"]["heads"]
    raw["head"]["heads"] = {("inner" if k == "intra" else k): v for k, v in heads.items()}
    raw["regularizers"][0]["intra_head"] = "inner"
    dmlplug.validate(raw)
    raw["regularizers"][0]["intra_head"] = "intra"
    with pytest.raises(RecipeError, match="did you mean 'inner'"):
        dmlplug.validate(raw)


def test_diva_rho_needs_one_value_or_one_per_decorrelated_head():
    recipe = ROOT / "recipes" / "glyphs_diva.toml"
    _fails(["regularizers.0.rho=[1.0, 2.0]"], "rho has 2 values for 3 decorrelated heads", recipe=recipe)
    dmlplug.validate(recipe, overrides=["regularizers.0.rho=[1.0, 2.0, 3.0]"])
    dmlplug.validate(recipe, overrides=["regularizers.0.rho=[1.0, 2.0]",
                                        'regularizers.0.decorrelate=["shared", "intra"]'])
