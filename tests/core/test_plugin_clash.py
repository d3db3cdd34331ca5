"""A plugin that registers a name another plugin has (a third-party `arcface`) breaks only what names it (issue 26).

Before, the second registration raised from plugin loading, so every command failed, `--version`, `--help` and
`doctor` included. The throwaway plugin here is registered in-process, as tests/hooks/ registers its plugins.
"""

from __future__ import annotations

import pytest

import dmlplug.plugins
from dmlplug import hookimpl
from dmlplug.cli import main
from dmlplug.errors import ComponentError
from dmlplug.plugins import PluginHost
from dmlplug.recipe import load_recipe

QUICKSTART = {"data": {"dataset": {"name": "glyphs"}}, "backbone": {"name": "timm", "model": "resnet10t"},
              "loss": {"name": "multi_similarity"}}


class ClashingPlugin:
    """A third-party plugin whose `arcface` clashes with PML's, next to a loss of its own."""

    @hookimpl
    def register_losses(self, register):
        register("arcface", lambda params, ctx: None, description="Someone else's ArcFace.")
        register("their_loss", lambda params, ctx: None, description="A loss of their own.")


@pytest.fixture
def clashing_host():
    host = PluginHost().load(entry_points=False)
    host.add_plugin(ClashingPlugin(), "their_arcface")  # raised PluginError before the fix
    return host


@pytest.fixture
def cli_host(clashing_host, monkeypatch):
    monkeypatch.setattr(dmlplug.plugins, "_HOST", clashing_host)
    return clashing_host


def _cli(capsys, *args):
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_clash_is_refused_only_where_the_name_is_used(clashing_host):
    registry = clashing_host.registry
    assert clashing_host.records["their_arcface"].error is None and clashing_host.records["pml"].error is None
    assert registry.get("losses", "their_loss").plugin == "their_arcface"
    assert registry.get("losses", "cosface").plugin == "pml"  # the rest of both plugins works
    load_recipe(QUICKSTART, registry=registry)
    with pytest.raises(ComponentError) as caught:
        load_recipe({**QUICKSTART, "loss": {"name": "arcface"}}, registry=registry)
    error = caught.value
    assert "loss name 'arcface' is registered by plugin 'pml' (dmlplug" in error.what
    assert "and plugin 'their_arcface'" in error.what and "loss.name" in error.where
    assert "DMLPLUG_DISABLE_PLUGINS=their_arcface to use plugin 'pml'" in error.fix
    assert "DMLPLUG_DISABLE_PLUGINS=pml to use plugin 'their_arcface'" in error.fix


def test_both_plugin_records_say_so(clashing_host):
    for name in ("pml", "their_arcface"):
        note = clashing_host.records[name].note
        assert note and "'arcface'" in note and "plugin 'pml'" in note and "plugin 'their_arcface'" in note


def test_the_suggested_fix_resolves_the_name(monkeypatch):
    monkeypatch.setenv("DMLPLUG_DISABLE_PLUGINS", "pml")
    host = PluginHost().load(entry_points=False)
    host.add_plugin(ClashingPlugin(), "their_arcface")
    assert host.registry.get("losses", "arcface").plugin == "their_arcface"
    assert not host.registry.clash_list() and host.records["their_arcface"].note is None


def test_version_help_and_other_commands_keep_working(cli_host, capsys):
    code, out, _ = _cli(capsys, "--version")
    assert code == 0 and out.startswith("dmlplug ")
    code, out, _ = _cli(capsys, "--help")
    assert code == 0 and "validate" in out
    code, out, _ = _cli(capsys, "list", "losses")
    assert code == 0 and "their_loss" in out


def test_plugins_command_names_both_plugins(cli_host, capsys):
    code, out, _ = _cli(capsys, "plugins")
    assert code == 0
    clash_lines = [line for line in out.splitlines() if "CLASH" in line]
    assert len(clash_lines) == 2 and all("'pml'" in line and "'their_arcface'" in line for line in clash_lines)


def test_doctor_fails_the_clash_and_names_both_plugins(cli_host, capsys):
    code, out, _ = _cli(capsys, "doctor")
    assert code == 1
    line = next(line for line in out.splitlines() if line.startswith("fail") and "'arcface'" in line)
    assert "plugin 'pml' (dmlplug" in line and "plugin 'their_arcface'" in line
    assert "DMLPLUG_DISABLE_PLUGINS=their_arcface" in out


def test_validate_of_a_recipe_naming_it_is_one_clear_error(cli_host, capsys, tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('[data.dataset]\nname = "glyphs"\n[backbone]\nname = "timm"\nmodel = "resnet10t"\n'
                      '[loss]\nname = "multi_similarity"\n')
    assert _cli(capsys, "validate", str(recipe))[0] == 0
    code, out, err = _cli(capsys, "validate", str(recipe), "--set", 'loss.name="arcface"')
    assert code == 2 and "Traceback" not in err
    assert err.startswith("error: loss name 'arcface' is registered by plugin 'pml'")
    assert "DMLPLUG_DISABLE_PLUGINS=" in err


def test_an_installed_distribution_that_clashes_leaves_the_cli_working(tmp_path):
    """The same through an entry point, in a fresh process: what a user with such a distribution installed sees."""
    from e2e import broken_plugin_site, run_cli

    body = ("from dmlplug import hookimpl\n\n\n@hookimpl\ndef register_losses(register):\n"
            "    register('arcface', lambda params, ctx: None)\n")
    site = broken_plugin_site(tmp_path / "site", dist="dmlplug-their-arcface", module="their_arcface",
                              entry="their_arcface", body=body)
    env = {"PYTHONPATH": str(site)}
    version = run_cli("--version", env=env)
    assert version.returncode == 0 and version.stdout.startswith("dmlplug "), version.stderr
    doctor = run_cli("doctor", env=env)
    assert doctor.returncode == 1 and "plugin 'their_arcface' (dmlplug-their-arcface 0.1)" in doctor.stdout
    assert "DMLPLUG_DISABLE_PLUGINS=their_arcface" in doctor.stdout
    fixed = run_cli("doctor", "--json", env={**env, "DMLPLUG_DISABLE_PLUGINS": "their_arcface"})
    assert "name clash" not in fixed.stdout
