"""The ooDML [data] split keys left the host schema: recipes that use them are told the new form."""

import pytest

from dmlplug import Params
from dmlplug.errors import RecipeError
from dmlplug.recipe import DataSection, load_recipe
from dmlplug.registry import Registry


class _Open(Params):
    model_config = {"extra": "allow"}


def _registry():
    reg = Registry()
    f = lambda params, ctx: None  # noqa: E731
    for kind, name in [("datasets", "toy"), ("samplers", "m_per_class"), ("backbones", "timm"), ("heads", "linear"),
                       ("losses", "triplet"), ("evaluators", "recall"), ("evaluators", "map_at_r"),
                       ("loggers", "console"), ("loggers", "tensorboard")]:
        reg.register_callback(kind, "t")(name, f, params=_Open)
    return reg


def _recipe(**data):
    return {
        "data": {"dataset": {"name": "toy"}, **data},
        "backbone": {"name": "timm"},
        "loss": {"name": "triplet"},
    }


NEW_FORM = ('[data.dataset] name = "oodml_split" with split_file, split_id, part and the wrapped dataset as a '
            'table: dataset = { name = "cub200", root = "..." }')


@pytest.mark.parametrize("data", [
    {"split_file": "splits.json", "split_id": 1},
    {"split_file": "splits.json", "split_id": 1, "split_part": "few_shot_base"},
    {"split_id": 2},
    {"split_part": "few_shot_base"},
])
def test_old_split_keys_name_the_new_form(data):
    with pytest.raises(RecipeError) as err:
        load_recipe(_recipe(**data), registry=_registry())
    text = str(err.value)
    assert "[data] split_file/split_id/split_part moved" in text and NEW_FORM in text
    assert "[data] " + ", ".join(k for k in ("split_file", "split_id", "split_part") if k in data) in text


def test_old_split_keys_given_by_override_are_caught_too():
    with pytest.raises(RecipeError, match="split_part moved"):
        load_recipe(_recipe(), ["data.split_file=s.json", "data.split_id=1"], registry=_registry())


def test_old_default_split_part_alone_is_ignored():
    # Resolved recipes written before the move hold split_part = "zero_shot" (the old default).
    recipe = load_recipe(_recipe(split_part="zero_shot"), registry=_registry())
    assert "split_part" not in recipe.resolved()["data"]


def test_split_fields_are_gone_and_class_lists_stay():
    assert not {"split_file", "split_id", "split_part"} & set(DataSection.model_fields)
    recipe = load_recipe(_recipe(train_classes=["a"], test_classes=["b"]), registry=_registry())
    assert recipe.recipe.data.train_classes == ["a"] and recipe.recipe.data.test_classes == ["b"]
    with pytest.raises(RecipeError, match="train_classes and test_classes go together"):
        load_recipe(_recipe(train_classes=["a"]), registry=_registry())
