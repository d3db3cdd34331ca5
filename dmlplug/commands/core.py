"""The core commands of the ``dmlplug`` command line: run, validate, plugins, list, report, doctor, ``plugin new``.

:func:`dmlplug.commands.register_commands` adds them to the app. Each command imports what it needs inside its
body, so ``dmlplug --help`` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from dmlplug.commands.options import RecipeArg, SetOpt


def cmd_run(
    recipe: RecipeArg,
    set_: SetOpt = None,
    out: Annotated[Path | None, typer.Option("--out", help="Exact run directory (must be new or empty).")] = None,
    device: Annotated[str | None, typer.Option("--device", help="auto, cpu or cuda (overrides run.device).")] = None,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="Print nothing while training (no progress bars, no epoch lines); the JSON summary "
        "is still printed.")] = False,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue a run from its last checkpoint: the run directory given as RECIPE or --out, "
        "else the latest run of the recipe.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="With --resume: continue even though the recipe changed (recorded in resume.jsonl).")]
    = False,
) -> None:
    """Validate a recipe, then train and evaluate it; results go to a new run directory.

    RECIPE may also be an existing run directory, which is then continued (as with --resume).
    """
    from dmlplug.engine.resume import is_run_directory
    from dmlplug.plugins import get_host
    from dmlplug.recipe import load_recipe, override_pairs

    pairs = override_pairs(set_ or [])
    if device is not None:
        pairs["run.device"] = device
    source: Any = recipe
    if not resume and not is_run_directory(recipe):
        # Validated before the engine (and torch) is imported: a bad recipe is refused in half a second, not two.
        source = load_recipe(recipe, pairs, registry=get_host().registry)

    from dmlplug.engine.launch import run_recipe

    result = run_recipe(source, pairs, out=out, quiet=quiet, resume=resume, force=force, host=get_host())
    summary = {"run_dir": str(result.directory), "selected_on": result.selected_on,
               "reported_on": result.reported_on, "initial": result.initial_metrics, "final": result.metrics,
               "best_epoch": result.best_epoch, "best": result.best_metrics}
    typer.echo(json.dumps(summary, indent=2))


def cmd_validate(recipe: RecipeArg, set_: SetOpt = None,
                 show: Annotated[bool, typer.Option("--show", help="Print the resolved recipe.")] = False) -> None:
    """Check a recipe completely (syntax, keys, types, component names and parameters) without running it.

    It also says which split selects best.pt and why (a recipe selects on the test split only when it says so).
    A file a plugin owns (a `dmlplug tune` search space, NAME.space.toml) is checked by that plugin instead.
    """
    from dmlplug.errors import DmlplugError
    from dmlplug.plugins import get_host
    from dmlplug.recipe import load_recipe
    from dmlplug.recipe.checks import describe_recipe_selection

    arguments = {"path": Path(recipe), "overrides": list(set_ or []), "registry": get_host().registry}
    claimed = [summary for _, summary in get_host().call_each("validate_file", lambda plugin: arguments,
                                                               reraise=(DmlplugError,)) if summary is not None]
    if claimed:
        typer.echo(f"{recipe}: OK ({'; '.join(claimed)})")
        return
    validated = load_recipe(recipe, set_ or [], registry=get_host().registry)
    if show:
        typer.echo(validated.dumps())
    typer.echo(f"selection: {describe_recipe_selection(validated)}")
    typer.echo(f"{recipe}: OK")


def cmd_plugins(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> None:
    """List loaded plugins: name, version, distribution, hooks implemented, load error if any."""
    from dmlplug.plugins import get_host

    host = get_host()
    rows: list[dict[str, Any]] = [
        {"name": r.name, "version": r.version, "distribution": r.distribution, "builtin": r.builtin,
         "hooks": r.hooks, "error": r.error, "note": r.note}
        for r in host.records.values()
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        origin = f"{row['distribution']} {row['version']}".strip() + (" (builtin)" if row["builtin"] else "")
        typer.echo(f"{row['name']:<24} {origin:<30} {', '.join(row['hooks'])}")
        if row["error"]:
            typer.echo(f"{'':<24} LOAD ERROR: {row['error']}")
        if row["note"]:
            typer.echo(f"{'':<24} NOTE: {row['note']}")


def cmd_list(
    kind: Annotated[str | None, typer.Argument(
        help="Component kind (losses, miners, distances, reducers ...), or a wildcard over every kind; all "
        "when omitted.", metavar="[KIND]", show_default=False)] = None,
    name: Annotated[str | None, typer.Argument(
        help="One component (everything about it), or a wildcard such as '*proxy*'.", metavar="[NAME]",
        show_default=False)] = None,
    params: Annotated[bool, typer.Option(
        "--params", help="Show every parameter with its type, default and description.")] = False,
) -> None:
    """List what a recipe can name: components by kind, the plugin providing each, and their parameters.

    `dmlplug list losses arcface` shows one component in full; `dmlplug list losses '*proxy*'` (or
    `dmlplug list '*proxy*'` over every kind) filters names with shell-style wildcards, as timm's
    `list_models` does.
    """
    from dmlplug.listing import detail_lines, is_pattern, list_kind, matches, param_lines, summary_line
    from dmlplug.plugins import get_host
    from dmlplug.protocols.kinds import KINDS

    registry = get_host().registry
    pattern = None
    if kind is not None and name is None and is_pattern(kind):
        kinds, pattern = list(KINDS), kind
    else:
        kinds = [list_kind(kind)] if kind else list(KINDS)
    if name is not None and not is_pattern(name):
        typer.echo("\n".join(detail_lines(registry.get(kinds[0], name))))
        return
    pattern = name if name is not None else pattern
    shown = 0
    for k in kinds:
        infos = [i for i in registry.infos(k) if matches(pattern, (i.name, *i.aliases))]
        if pattern is not None and not infos:
            continue
        typer.echo(f"{k}:")
        for info in infos:
            shown += 1
            typer.echo(summary_line(info))
            if params:
                for line in param_lines(info.params):
                    typer.echo(line)
    if pattern is not None and not shown:
        typer.echo(f"no {kinds[0]} match {pattern!r}" if len(kinds) == 1 else f"nothing matches {pattern!r}")


def cmd_report(
    runs: Annotated[list[Path], typer.Argument(help="Run directories, or folders that contain runs.",
                                               show_default=False)],
    out: Annotated[Path | None, typer.Option("--out", help="Write the Markdown report here (figures in "
                                             "<stem>_figures/, table also as <stem>.csv).")] = None,
    csv_path: Annotated[Path | None, typer.Option("--csv", help="Write the table as CSV here.")] = None,
    metric: Annotated[list[str] | None, typer.Option("--metric", "-m", help="Metric to show (repeatable; "
                                                     "default: those every run reports).")] = None,
) -> None:
    """Compare runs: final and best metrics (mean ± std over seeds), learning curves, metric vs FID."""
    from dmlplug.plugins import get_host
    from dmlplug.report import write_report

    _, text = write_report(runs, out, host=get_host(), csv_path=csv_path, metrics=metric or None)
    typer.echo(text if out is None else f"report written to {out}")


def cmd_doctor(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> None:
    """Check the installation: torch, CUDA and GPUs, faiss flavour, loggers' packages, plugins and load errors."""
    from dmlplug.doctor import as_json as checks_json
    from dmlplug.doctor import diagnose, render

    checks = diagnose()
    typer.echo(json.dumps(checks_json(checks), indent=2) if as_json else render(checks))
    if any(c.status == "fail" for c in checks):
        raise typer.Exit(1)  # main() turns the code of a typer.Exit into the exit status


def cmd_plugin_new(
    name: Annotated[str, typer.Argument(
        help="Plugin name, e.g. my-loss (gives dmlplug-my-loss / dmlplug_my_loss); dmlplug-my-loss and "
        "dmlplug_my_loss give the same: the prefix is never doubled.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", help="Folder to create the plugin distribution in.")] = Path("."),
    kind: Annotated[str, typer.Option("--kind", help="What the plugin registers: any component kind, singular or "
                                      "plural (loss, miner, head, evaluator, reranker, index_codec, tune_pruner "
                                      "...; `dmlplug list` shows them all).")] = "loss",
) -> None:
    """Scaffold a pip-installable plugin distribution that registers one component and passes its own tests."""
    from dmlplug.registry import singular
    from dmlplug.scaffold import component_name, new_plugin, plugin_names

    path = new_plugin(name, out, kind)
    names = plugin_names(name)
    typer.echo(f"created {path}: package {names['module']}, {singular(kind)} {component_name(name, kind)!r}\n"
               f"next: pip install -e {path} && python -m pytest -q {path / 'tests'}")
