"""``register_commands`` and ``report_section``: the hooks that run outside training, through the real CLI."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import pytest
import typer

import dmlplug
from dmlplug.files import atomic_write
from dmlplug.protocols import ReportSection


class CommandPlugin:
    """Adds ``dmlplug hooks-hello [--name NAME]``."""

    def __init__(self) -> None:
        self.apps: list = []

    @dmlplug.hookimpl
    def register_commands(self, app):
        self.apps.append(app)

        @app.command("hooks-hello")
        def hello(name: Annotated[str, typer.Option("--name", help="Who to greet.")] = "world") -> None:
            """Greet from a throwaway plugin."""
            typer.echo(f"hello {name}")


class SectionPlugin:
    """Adds a report section with a table column and, when the report draws figures, a PNG."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    @dmlplug.hookimpl
    def report_section(self, groups, metrics, figure_dir):
        self.calls.append({"groups": groups, "metrics": metrics, "figure_dir": figure_dir})
        figures = []
        if figure_dir is not None:
            figures.append(atomic_write(Path(figure_dir) / "hooks_figure.png", _png))
        columns = {g.key: {"hooks column": f"{len(g.runs)} run(s)"} for g in groups}
        return ReportSection("Hooks section", markdown="Written by a throwaway plugin.", columns=columns,
                             figures=figures)


def _png(handle) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [0, 1])
    fig.savefig(handle, format="png")
    plt.close(fig)


@pytest.mark.hook("register_commands")
def test_register_commands_adds_a_cli_command(use_host, capsys):
    from dmlplug.cli import main

    plugin = CommandPlugin()
    host = use_host((plugin, "hooks_commands"))
    main(["hooks-hello", "--name", "dml"])
    assert capsys.readouterr().out == "hello dml\n"
    assert plugin.apps and all(isinstance(app, typer.Typer) for app in plugin.apps)
    try:
        main(["--help"])
    except SystemExit as exc:  # depending on click, help ends with Exit(0)
        assert exc.code == 0
    listed = capsys.readouterr().out
    assert "hooks-hello" in listed and "run" in listed  # next to the core commands
    assert host.records["hooks_commands"].error is None


@pytest.mark.hook("register_commands")
def test_a_failing_register_commands_leaves_the_cli_working(use_host, capsys):
    from dmlplug.cli import main

    class Broken:
        @dmlplug.hookimpl
        def register_commands(self, app):
            raise RuntimeError("boom")

    host = use_host((Broken(), "hooks_broken_commands"))
    main(["list", "losses"])
    assert "losses:" in capsys.readouterr().out
    assert "boom" in host.records["hooks_broken_commands"].error


@pytest.mark.hook("report_section")
def test_report_section_appears_in_the_report(use_host, hooked_run, tmp_path, capsys):
    from dmlplug.cli import main

    plugin = SectionPlugin()
    use_host((plugin, "hooks_report"))
    out = tmp_path / "report.md"
    main(["report", str(hooked_run.directory), "--out", str(out)])
    (call,) = plugin.calls
    (group,) = call["groups"]
    assert group.label and isinstance(group.key, str) and len(group.runs) == 1
    run = group.runs[0]
    assert Path(run.directory) == hooked_run.directory and run.recipe["run"]["name"] == "hooks"
    assert run.final == hooked_run.result.metrics and run.best == hooked_run.result.best_metrics
    mean, std, n = group.stat("best", "hooks/nn_agreement")
    assert n == 1 and mean == hooked_run.result.best_metrics["hooks/nn_agreement"]
    assert "hooks/nn_agreement" in call["metrics"] and all(isinstance(m, str) for m in call["metrics"])
    assert call["figure_dir"] == tmp_path / "report_figures"

    text = out.read_text()
    assert "## Hooks section\n\nWritten by a throwaway plugin." in text
    header = next(line for line in text.splitlines() if line.startswith("| run"))
    assert "hooks column" in header and re.search(r"\| 1 run\(s\) \|", text)
    assert "![hooks_figure](report_figures/hooks_figure.png)" in text
    assert (tmp_path / "report_figures" / "hooks_figure.png").stat().st_size > 0

    capsys.readouterr()
    main(["report", str(hooked_run.directory)])  # no --out: no figures, the section still shows
    assert plugin.calls[-1]["figure_dir"] is None
    assert "## Hooks section" in capsys.readouterr().out


class FilePlugin:
    """Owns ``*.hooks.toml`` files: valid when they hold ``ok = true``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Path, list[str]]] = []
        self.registries: list[object] = []

    @dmlplug.hookimpl
    def validate_file(self, path, overrides, registry):
        self.calls.append((path, overrides))
        self.registries.append(registry)
        if not path.name.endswith(".hooks.toml"):
            return None
        if "ok = true" not in path.read_text():
            from dmlplug.errors import RecipeError

            raise RecipeError("not ok", where=str(path), fix="write ok = true")
        return f"hooks file, {len(overrides)} override(s)"


@pytest.mark.hook("validate_file")
def test_validate_file_lets_a_plugin_check_its_own_files(use_host, tmp_path, capsys):
    from dmlplug.cli import main

    plugin = FilePlugin()
    host = use_host((plugin, "hooks_files"))
    good = tmp_path / "a.hooks.toml"
    good.write_text("ok = true\n")
    main(["validate", str(good), "--set", "x=1"])
    assert capsys.readouterr().out == f"{good}: OK (hooks file, 1 override(s))\n"
    assert plugin.calls == [(good, ["x=1"])]
    assert plugin.registries == [host.registry]  # the command's host's, to resolve names in the file
    bad = tmp_path / "b.hooks.toml"
    bad.write_text("ok = false\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["validate", str(bad)])
    assert exit_info.value.code == 2 and "not ok" in capsys.readouterr().err
    # A file no plugin claims is a recipe, as before.
    main(["validate", str(Path(__file__).parents[2] / "recipes" / "quickstart.toml")])
    assert capsys.readouterr().out.endswith("quickstart.toml: OK\n")
