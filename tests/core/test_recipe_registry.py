"""load_recipe resolves every component, nested tables included, in the registry it is given."""

from typing import Any

import pytest
from pydantic import Field, ValidationInfo, field_validator
from stand_in_registry import stand_in_registry

import dmlplug.plugins
from dmlplug import Params
from dmlplug.errors import RecipeError
from dmlplug.plugins import PluginHost
from tests.shared.recipes import load_recipe


class _NoHost:
    """Stands in for the process-wide plugin host: any use of it fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"the process-wide plugin host was used (.{name})")


@pytest.fixture
def no_host(monkeypatch):
    monkeypatch.setattr(dmlplug.plugins, "_HOST", _NoHost())


class Margin(Params):
    margin: float = Field(0.2, gt=0, description="m")


seen_registries: list[Any] = []


class Wrapper(Params):
    inner: dict[str, Any] = Field(description="A nested loss table.")

    @field_validator("inner")
    @classmethod
    def _nested(cls, table: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        # What a plugin does for a nested component table: look it up in the context's registry.
        registry = info.context["registry"]
        seen_registries.append(registry)
        rest = {k: v for k, v in table.items() if k != "name"}
        registry.get("losses", table["name"]).validate(rest, where="loss.inner", registry=registry)
        return table


def _registry():
    reg = stand_in_registry()
    f = lambda params, ctx: None  # noqa: E731
    reg.register_callback("losses", "t")("triplet", f, params=Margin)
    reg.register_callback("losses", "t")("wrapper", f, params=Wrapper)
    return reg


def _recipe(inner):
    return {
        "data": {"dataset": {"name": "toy"}, "sampler": {"name": "m_per_class"}},
        "backbone": {"name": "timm"},
        "loss": {"name": "wrapper", "inner": inner},
    }


def test_nested_validation_gets_the_given_registry(no_host):
    seen_registries.clear()
    registry = _registry()
    recipe = load_recipe(_recipe({"name": "triplet", "margin": 0.1}), registry=registry)
    assert recipe.components["loss"].params.inner == {"name": "triplet", "margin": 0.1}
    assert seen_registries and all(r is registry for r in seen_registries)


def test_nested_errors_come_from_the_given_registry(no_host):
    with pytest.raises(RecipeError, match=r"loss\.inner\.margn: unknown key \(did you mean 'margin'"):
        load_recipe(_recipe({"name": "triplet", "margn": 0.1}), registry=_registry())


def test_component_validate_passes_its_registry_as_context():
    registry = _registry()
    seen_registries.clear()
    registry.get("losses", "wrapper").validate({"inner": {"name": "triplet"}}, where="loss", registry=registry)
    assert seen_registries == [registry]
    seen = []

    class Probe(Params):
        x: int = Field(0, description="x")

        @field_validator("x")
        @classmethod
        def _probe(cls, value: int, info: ValidationInfo) -> int:
            seen.append(info.context)
            return value

    registry.register_callback("losses", "t")("probe", lambda p, c: None, params=Probe)
    registry.get("losses", "probe").validate({"x": 1}, where="loss")
    assert seen == [{"registry": None}]  # no registry given: the context says so, nothing is looked up


def test_builtin_nested_loss_table_uses_the_given_registry(monkeypatch):
    # A registry built by hand from the built-in plugins; the process-wide host must stay untouched.
    registry = PluginHost().load(entry_points=False).registry
    monkeypatch.setattr(dmlplug.plugins, "_HOST", _NoHost())
    recipe = {
        "data": {"dataset": {"name": "glyphs"}, "sampler": {"name": "m_per_class"}},
        "backbone": {"name": "timm", "model": "resnet10t"},
        "loss": {"name": "cross_batch_memory", "loss": {"name": "contrastive", "pos_margin": 0.1}},
    }
    assert load_recipe(recipe, registry=registry).components["loss"].name == "cross_batch_memory"
    recipe["loss"]["loss"] = {"name": "contrastive", "pos_margn": 0.1}
    with pytest.raises(RecipeError, match="pos_margn"):
        load_recipe(recipe, registry=registry)


def test_without_a_registry_the_process_wide_host_is_used(monkeypatch):
    class Host:
        registry = _registry()

    monkeypatch.setattr(dmlplug.plugins, "_HOST", Host())
    seen_registries.clear()
    load_recipe(_recipe({"name": "triplet"}))
    assert seen_registries == [Host.registry]
