import pytest
from pydantic import Field

from dmlplug import BuildContext, Params, hookimpl
from dmlplug.errors import ComponentError, PluginError, RecipeError
from dmlplug.plugins import PluginHost
from dmlplug.registry import Registry


class MarginParams(Params):
    margin: float = Field(0.2, gt=0, description="Margin.")


class BuiltLoss:
    """A stand-in loss: callable, as the Loss protocol requires."""

    def __init__(self, margin: float, ctx: BuildContext):
        self.margin, self.ctx = margin, ctx

    def __call__(self, embeddings, labels, indices_tuple=None):
        return 0.0


def factory(params, ctx):
    return BuiltLoss(params.margin, ctx)


def test_register_get_and_aliases():
    registry = Registry()
    registry.register_callback("losses", "p1")("margin_x", factory, params=MarginParams, aliases=("mx",),
                                                  tags=("uses_tuples",))
    info = registry.get("loss", "mx")
    assert info.name == "margin_x" and info.plugin == "p1" and "uses_tuples" in info.tags
    built = info.build(info.validate({"margin": 0.5}, "loss"), BuildContext())
    assert built.margin == 0.5 and built.ctx.building == "loss 'margin_x' (plugin 'p1')"


def test_a_built_component_is_checked_against_its_kinds_protocol():
    registry = Registry()
    registry.register_callback("backbones", "sloppy_plugin")("no_features", lambda params, ctx: object())
    info = registry.get("backbones", "no_features")
    with pytest.raises(ComponentError) as err:
        info.build(info.validate({}, "backbone"), BuildContext())
    message = str(err.value)
    assert "'num_features'" in message and "'__call__'" in message and "Backbone protocol" in message
    assert "sloppy_plugin" in message


def test_require_names_the_component_and_the_missing_field():
    registry = Registry()
    registry.register_callback("losses", "p1")("needs_classes",
                                               lambda params, ctx: BuiltLoss(ctx.require("num_classes"), ctx))
    info = registry.get("losses", "needs_classes")
    with pytest.raises(ComponentError, match="loss 'needs_classes' .plugin 'p1'. needs num_classes from the build"):
        info.build(info.validate({}, "loss"), BuildContext())
    assert info.build(info.validate({}, "loss"), BuildContext(num_classes=3)).margin == 3


def test_duplicate_names_clash_and_name_both_plugins_when_looked_up():
    # A second registration used to raise PluginError, from every command's plugin loading: now only the name
    # is refused, and only where something looks it up.
    registry = Registry()
    registry.register_callback("losses", "first_plugin")("same", factory)
    registry.register_callback("losses", "second_plugin")("same", factory)
    registry.register_callback("losses", "second_plugin")("other", factory)
    with pytest.raises(ComponentError) as err:
        registry.get("losses", "same")
    assert "first_plugin" in str(err.value) and "second_plugin" in str(err.value)
    assert "DMLPLUG_DISABLE_PLUGINS=second_plugin" in err.value.fix
    assert "DMLPLUG_DISABLE_PLUGINS=first_plugin" in err.value.fix
    assert registry.get("losses", "other").plugin == "second_plugin"
    assert [(kind, key, [i.plugin for i in infos]) for kind, key, infos in registry.clash_list()] == [
        ("losses", "same", ["first_plugin", "second_plugin"])]


def test_an_alias_clash_refuses_the_alias_only():
    registry = Registry()
    registry.register_callback("datasets", "first")("cub200", factory, aliases=("cub",))
    registry.register_callback("datasets", "second")("cub_birds", factory, aliases=("cub", "birds"))
    assert registry.get("datasets", "cub200").plugin == "first"
    assert registry.get("datasets", "birds").name == "cub_birds"  # its name and other aliases still resolve
    with pytest.raises(ComponentError, match="dataset name 'cub' is registered by plugin 'first' and plugin 'second'"):
        registry.get("datasets", "cub")
    # A name that clashes with another component's alias: the newcomer is reachable under none of its names.
    registry.register_callback("datasets", "third")("birds", factory, aliases=("third_birds",))
    with pytest.raises(ComponentError, match="'birds' is registered by plugin 'second' and plugin 'third'"):
        registry.get("datasets", "birds")
    with pytest.raises(ComponentError, match="unknown dataset 'third_birds'"):
        registry.get("datasets", "third_birds")


def test_an_essential_plugin_is_never_the_one_the_fix_disables():
    registry = Registry(essential=frozenset({"heads"}), origins={"heads": "dmlplug 0.1.0, built-in",
                                                                  "their_heads": "dmlplug-their-heads 2.0"})
    registry.register_callback("heads", "heads")("linear", factory)
    registry.register_callback("heads", "their_heads")("linear", factory)
    error = registry.clash_error("heads", "linear")
    assert "plugin 'heads' (dmlplug 0.1.0, built-in) and plugin 'their_heads' (dmlplug-their-heads 2.0)" in error.what
    assert "DMLPLUG_DISABLE_PLUGINS=their_heads" in error.fix and "DMLPLUG_DISABLE_PLUGINS=heads" not in error.fix


def test_a_plugin_registering_one_name_twice_is_told_to_its_author():
    registry = Registry()
    registry.register_callback("losses", "sloppy")("same", factory)
    registry.register_callback("losses", "sloppy")("same", factory)
    with pytest.raises(ComponentError, match="registered by plugin 'sloppy' twice") as err:
        registry.get("losses", "same")
    assert "plugin's author" in err.value.fix


def test_unknown_name_suggests_close_names_and_where_to_list():
    registry = Registry()
    registry.register_callback("losses", "p")("arcface", factory)
    with pytest.raises(ComponentError) as err:
        registry.get("losses", "arcfase")
    assert "did you mean 'arcface'" in str(err.value)
    assert "dmlplug list losses" in str(err.value)


def test_params_typo_is_an_error_with_suggestion():
    registry = Registry()
    registry.register_callback("losses", "p")("m", factory, params=MarginParams)
    with pytest.raises(RecipeError) as err:
        registry.get("losses", "m").validate({"margn": 0.1}, "loss")
    assert "loss.margn" in str(err.value) and "did you mean 'margin'" in str(err.value)
    with pytest.raises(RecipeError, match="greater than 0"):
        registry.get("losses", "m").validate({"margin": -1}, "loss")


def test_params_must_be_a_params_model():
    registry = Registry()
    with pytest.raises(PluginError, match="subclass of dmlplug.Params"):
        registry.register_callback("losses", "p")("bad", factory, params=dict)


def test_params_given_as_a_function_are_made_when_first_read_and_kept():
    calls = []

    def make():
        calls.append("made")
        return MarginParams

    registry = Registry()
    registry.register_callback("losses", "p1")("m", factory, params=make)
    info = registry.get("losses", "m")
    assert calls == []
    assert info.validate({"margin": 0.5}, "loss").margin == 0.5 and info.params is MarginParams
    assert calls == ["made"]


@pytest.mark.parametrize(("make", "message"), [
    (lambda: dict, "its params function returned <class 'dict'>, not a subclass of dmlplug.Params"),
    (lambda: 1 / 0, "its params function failed: ZeroDivisionError"),
])
def test_a_params_function_that_fails_is_the_plugins_error(make, message):
    registry = Registry()
    registry.register_callback("losses", "p1")("m", factory, params=make)
    with pytest.raises(PluginError, match=message) as err:
        registry.get("losses", "m").validate({}, "loss")
    assert err.value.where == "plugin 'p1'"


class _GoodPlugin:
    @hookimpl
    def register_losses(self, register):
        register("plugin_loss", factory, params=MarginParams)


class _RaisingPlugin:
    @hookimpl
    def register_miners(self, register):
        raise RuntimeError("boom")


class _MisspelledPlugin:
    @hookimpl
    def register_lossez(self, register):  # typo: not a hook
        pass


class _InvalidParamsPlugin:
    @hookimpl
    def register_losses(self, register):
        register("invalid_params_loss", factory, params=dict)


def test_an_invalid_registration_is_the_plugins_load_error_not_every_commands():
    # Registry.add's PluginError used to propagate out of plugin loading, so every command failed.
    host = PluginHost().load(builtins=False, entry_points=False)
    host.add_plugin(_GoodPlugin(), "good")
    host.add_plugin(_InvalidParamsPlugin(), "invalid")
    assert "subclass of dmlplug.Params" in host.load_errors["invalid"]
    assert host.registry.names("losses") == ["plugin_loss"]


def test_plugins_are_isolated_and_errors_recorded():
    host = PluginHost().load(builtins=False, entry_points=False)
    host.add_plugin(_GoodPlugin(), "good")
    host.add_plugin(_RaisingPlugin(), "raising")
    host.add_plugin(_MisspelledPlugin(), "misspelled")
    assert host.registry.names("losses") == ["plugin_loss"]
    assert "boom" in host.load_errors["raising"]
    assert "unknown hook" in host.load_errors["misspelled"]
    with pytest.raises(ComponentError) as err:
        host.registry.get("miners", "anything")
    assert "raising" in str(err.value)  # the fix names the broken plugin
