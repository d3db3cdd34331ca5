"""Defects a review of the typed contract found, each pinned by a test that failed before its fix."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

import dmlplug
from dmlplug import BuildContext, Params
from dmlplug.errors import ComponentError, RecipeError
from dmlplug.plugins import PluginHost
from dmlplug.registry import Registry
from dmlplug.testing import ContractError, check_lr_schedule, check_regularizer, load_host
from tests.shared.recipes import load_recipe

QUICKSTART = Path(__file__).resolve().parents[2] / "recipes" / "quickstart.toml"


def test_a_none_inside_a_list_keeps_the_positions_of_the_others_in_the_resolved_recipe():
    # multiple_losses: one miner table per loss, {} for none; the resolved recipe must load back the same.
    loss = ('loss={name="multiple_losses", losses=[{name="triplet_margin"}, {name="contrastive"}], '
            'miners=[{}, {name="multi_similarity"}]}')
    recipe = load_recipe(QUICKSTART, [loss])
    again = load_recipe(tomllib.loads(recipe.dumps()))
    assert again.resolved() == recipe.resolved()
    assert again.components["loss"].params.miners[0] is None
    assert again.components["loss"].params.miners[1].name == "multi_similarity"


def test_component_tables_are_equal_after_a_copy():
    table = dmlplug.validate(QUICKSTART).components["loss"].table
    assert copy.deepcopy(table) == table
    assert table.params.model_copy(deep=True) == table.params


def test_core_commands_come_first_in_help():
    from dmlplug.cli import build_app

    help_text = CliRunner().invoke(build_app(), ["--help"]).output
    assert help_text.index(" run ") < help_text.index(" evaluate ") < help_text.index(" fewshot ")


@pytest.mark.parametrize(("override", "message"), [
    ('scheduler.nmae="cosine"', "scheduler.nmae: unknown key (did you mean 'name'?)"),
    ('optimizer.lrr=0.1', "optimizer.lrr: unknown key (did you mean 'lr'?)"),
    ("data.augment=3", 'data.augment: a registered augmentation name'),
])
def test_misspelt_section_keys_and_wrong_augment_types_get_one_clear_message(override, message):
    with pytest.raises(RecipeError) as info:
        load_recipe(QUICKSTART, [override])
    assert message in str(info.value) and "dict[str,any]" not in str(info.value)


def test_a_nested_table_error_names_the_field_path():
    with pytest.raises(RecipeError) as info:
        load_recipe(QUICKSTART, ['loss={name="contrastive", distance={name="lp_distance", q=3}}'])
    assert "distance.q: unknown key" in str(info.value)


def test_a_property_that_raises_still_counts_as_a_member():
    class Backbone:
        num_features = 4

        @property
        def broken(self):
            raise RuntimeError("not ready")

        def __call__(self, images):
            return images, None

    registry = Registry()
    registry.register_callback("backbones", "p")("odd", lambda params, ctx: Backbone())
    from dmlplug.protocols import Backbone as BackboneProtocol
    from dmlplug.registry import missing_members

    assert missing_members(Backbone(), BackboneProtocol) == []
    info = registry.get("backbones", "odd")
    assert isinstance(info.build(info.validate({}, "backbone"), BuildContext()), Backbone)


def test_the_kit_skips_losses_without_defaults_when_it_looks_for_a_tag():
    class NeedsMargin(Params):
        margin: float

        model_config = {"extra": "forbid"}

    host = PluginHost().load(entry_points=False)
    host.registry.register_callback("losses", "probe")("aaa_needs_margin", lambda p, c: None, params=NeedsMargin,
                                                        tags=("proxies",))
    check_regularizer("nir", host=host)  # a loss tagged proxies with defaults is found past it


def test_check_lr_schedule_says_what_it_needs():
    with pytest.raises(ContractError, match="epochs >= 2"):
        check_lr_schedule("step", host=load_host(), epochs=1)
    check_lr_schedule("step", host=load_host(), epochs=20)


def test_require_is_the_error_of_every_built_in_factory_outside_a_run():
    with pytest.raises(ComponentError, match="head 'linear' .plugin 'heads'. needs feature_dim"):
        dmlplug.create("head", "linear")
