"""`dmlplug plugins` names the distribution and version of every plugin, built-ins included (README: "version,
distribution")."""

from __future__ import annotations

import json
from importlib import metadata

from typer.testing import CliRunner

from dmlplug.cli import build_app
from dmlplug.plugins import DEFAULT_PLUGINS, PluginHost


def test_builtins_are_records_of_the_dmlplug_distribution_with_its_version():
    host = PluginHost().load(entry_points=False)
    expected = metadata.version("dmlplug")
    builtins = [r for r in host.records.values() if r.builtin]
    assert {r.module for r in builtins} == set(DEFAULT_PLUGINS)
    for record in builtins:
        assert (record.distribution, record.version) == ("dmlplug", expected), record


def test_plugins_json_shows_distribution_and_version_of_every_plugin():
    result = CliRunner().invoke(build_app(), ["plugins", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert {row["name"] for row in rows} >= {m.rsplit(".", 1)[-1] for m in DEFAULT_PLUGINS}
    for row in rows:
        assert row["distribution"] and row["version"], row
        if row["builtin"]:
            assert (row["distribution"], row["version"]) == ("dmlplug", metadata.version("dmlplug"))


def test_plugins_text_output_names_distribution_and_version_of_builtins():
    result = CliRunner().invoke(build_app(), ["plugins"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("pml "))
    assert f"dmlplug {metadata.version('dmlplug')} (builtin)" in line, line


def test_an_essential_plugin_cannot_be_disabled(monkeypatch):
    from dmlplug.plugins import ESSENTIAL_PLUGINS

    monkeypatch.setenv("DMLPLUG_DISABLE_PLUGINS", "tcm,heads")
    host = PluginHost().load(entry_points=False)
    assert "tcm" not in host.records and set(host.records) >= ESSENTIAL_PLUGINS
    assert host.records["heads"].error is None and "cannot disable it" in host.records["heads"].note
    assert host.registry.get("heads", "linear").plugin == "heads"
    # Every command keeps working, and `dmlplug plugins` says why the variable was not obeyed.
    import dmlplug.plugins

    monkeypatch.setattr(dmlplug.plugins, "_HOST", host)
    result = CliRunner().invoke(build_app(), ["plugins"])
    assert result.exit_code == 0 and "NOTE: essential" in result.output


def test_the_recipe_defaults_name_only_components_of_essential_plugins():
    from dmlplug.plugins import ESSENTIAL_PLUGINS
    from dmlplug.recipe import load_recipe

    host = PluginHost().load(entry_points=False)
    minimal = {"data": {"dataset": {"name": "glyphs"}}, "backbone": {"name": "timm", "model": "resnet10t"},
               "loss": {"name": "contrastive"}}
    recipe = load_recipe(minimal, registry=host.registry)
    defaults = {path: spec for path, spec in recipe.components.items()
                if path not in ("data.dataset", "backbone", "loss")}
    assert defaults, "the recipe defaults name no component"
    for path, spec in defaults.items():
        assert spec.info.plugin in ESSENTIAL_PLUGINS, (path, spec.info.plugin)
