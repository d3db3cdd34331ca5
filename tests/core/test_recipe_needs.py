"""ValidatedRecipe.needs: engine services collected once, at load time; EngineNeeds lives in dmlplug.needs."""

import subprocess
import sys

import pytest
from stand_in_registry import stand_in_registry

import dmlplug.recipe.capabilities as capabilities
import dmlplug.recipe.loading as loading
from dmlplug.errors import RecipeError
from dmlplug.needs import EngineNeeds
from dmlplug.recipe import load_recipe


def _registry(reg_requires=("ema", "views:2")):
    reg = stand_in_registry()
    f = lambda params, ctx: None  # noqa: E731
    reg.register_callback("losses", "t")("triplet", f, tags=("uses_tuples",))
    reg.register_callback("regularizers", "t")("ssl", f, requires=reg_requires)
    return reg


RECIPE = {
    "data": {"dataset": {"name": "toy"}, "sampler": {"name": "m_per_class"}},
    "backbone": {"name": "timm"},
    "loss": {"name": "triplet"},
    "regularizers": [{"name": "ssl"}],
}


def test_needs_are_collected_from_the_components():
    recipe = load_recipe(RECIPE, registry=_registry())
    assert isinstance(recipe.needs, EngineNeeds)
    assert recipe.needs.views == 2
    assert "ema" in recipe.needs and "feature_map" not in recipe.needs
    assert recipe.needs.by == {"ema": ["regularizers[0]"], "views": ["regularizers[0]"]}


def test_needs_are_computed_once_and_reused(monkeypatch):
    calls = []
    real = capabilities.collect_needs

    def counting(components, where=""):
        calls.append(where)
        return real(components, where)

    # Both names: the lazy property (loading) and the capability checks (capabilities).
    monkeypatch.setattr(loading, "collect_needs", counting)
    monkeypatch.setattr(capabilities, "collect_needs", counting)
    recipe = load_recipe(RECIPE, registry=_registry())
    assert len(calls) == 1  # during load_recipe: check_capabilities uses it
    needs = recipe.needs
    assert recipe.needs is needs
    assert len(calls) == 1


def test_needs_are_read_only():
    recipe = load_recipe(RECIPE, registry=_registry())
    with pytest.raises(AttributeError):
        recipe.needs = EngineNeeds()


def test_unknown_engine_service_still_fails_at_load():
    with pytest.raises(RecipeError, match="unknown engine service 'teleport'"):
        load_recipe(RECIPE, registry=_registry(reg_requires=("teleport",)))


def test_engine_needs_is_one_class_importable_from_both_places():
    from dmlplug.recipe import EngineNeeds as FromRecipe

    assert FromRecipe is EngineNeeds
    assert "views" in (EngineNeeds.__doc__ or "") and "__contains__" in (EngineNeeds.__doc__ or "")


def test_needs_module_imports_no_torch():
    code = "import dmlplug.needs, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
