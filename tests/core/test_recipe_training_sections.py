"""``[optimizer]``, ``[scheduler]`` and ``[data] augment`` name registered components; the engine's keys of
component tables are validated by their section's model (``dmlplug.recipe.schema.ENGINE_OPTIONS``).

Every mistake is found by ``dmlplug validate``, with the registry's "did you mean" and the key's path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import dmlplug
from dmlplug.errors import ComponentError, DmlplugError, RecipeError

QUICKSTART = Path(__file__).resolve().parents[2] / "recipes" / "quickstart.toml"


def _fails(override: str, error: type[DmlplugError], *needles: str) -> None:
    with pytest.raises(error) as info:
        dmlplug.validate(QUICKSTART, overrides=[override])
    text = str(info.value)
    assert all(needle in text for needle in needles), text


@pytest.mark.parametrize(("override", "needles"), [
    ('optimizer.name="adamm"', ("unknown optimizer 'adamm'", "did you mean 'adam'", "optimizer.name",
                                "dmlplug list optimizers")),
    ('scheduler.name="cosin"', ("unknown lr_schedule 'cosin'", "did you mean 'cosine'", "scheduler.name")),
    ('data.augment="ligth"', ("unknown augmentation 'ligth'", "did you mean 'light'", "data.augment")),
    ('data.augment={name="dmll"}', ("unknown augmentation 'dmll'", "data.augment")),
])
def test_unknown_names_fail_with_a_suggestion(override, needles):
    _fails(override, ComponentError, *needles)


@pytest.mark.parametrize(("override", "needles"), [
    # keys an optimizer or schedule does not take were silently ignored before: now they are errors
    ("optimizer.momentum=0.9", ("optimizer 'adam'", "optimizer.momentum: unknown key")),
    ('optimizer={name="sgd", betas=[0.9, 0.99]}', ("optimizer 'sgd'", "optimizer.betas: unknown key")),
    ("scheduler.patience=3", ("lr_schedule 'none'", "scheduler.patience: unknown key")),
    ("optimizer.lrr=0.1", ("optimizer.lrr: unknown key", "did you mean 'lr'")),
    ("loss.wieght=2", ("loss.wieght: unknown key", "did you mean 'weight'")),
    ("loss.weight=-1", ("loss.weight", "greater than or equal to 0")),
    ("loss.weight=true", ("loss.weight", "valid number")),
    ("backbone.warmup_epochs=1.5", ("backbone.warmup_epochs", "valid integer")),
    ('regularizers=[{name="tcm", weight=-1}]', ("regularizers[0].weight", "greater than or equal to 0")),
])
def test_keys_a_section_does_not_take_are_errors(override, needles):
    _fails(override, RecipeError, *needles)


def test_the_sections_are_resolved_with_their_components_parameters():
    recipe = dmlplug.validate(QUICKSTART, overrides=['optimizer.name="sgd"', "optimizer.nesterov=true",
                                                     'scheduler={name="cosine", warmup_epochs=2}'])
    resolved = recipe.resolved()
    assert resolved["optimizer"] == {"name": "sgd", "lr": 0.001, "weight_decay": 0.0001, "groups": {},
                                     "momentum": 0.9, "nesterov": True}
    assert resolved["scheduler"] == {"name": "cosine", "warmup_epochs": 2, "min_lr": 0.0}
    assert resolved["data"]["augment"] == "light"  # a bare name stays one
    assert recipe.components["optimizer"].options.lr == 0.001
    assert recipe.components["data.augment"].name == "light"
    # the resolved recipe is itself a recipe that resolves to the same thing
    assert dmlplug.validate(resolved).resolved() == resolved
    table = dmlplug.validate(QUICKSTART, overrides=['data.augment={name="dml"}']).resolved()["data"]["augment"]
    assert table == {"name": "dml"}


def test_engine_options_are_attributes_with_defaults():
    recipe = dmlplug.validate(QUICKSTART)
    loss, backbone = recipe.components["loss"], recipe.components["backbone"]
    assert (loss.options.weight, loss.options.embedding, backbone.options.warmup_epochs) == (1.0, "", 0)
    assert recipe.resolved()["loss"]["weight"] == 1.0 and "embedding" not in recipe.resolved()["loss"]
