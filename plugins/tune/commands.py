"""``dmlplug tune run | validate | report``: the search from the command line (docs/tune.md).

The work happens in :mod:`.tune`, :mod:`.space` and :mod:`.report`; they are imported inside the commands so
the CLI starts without torch or optuna.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer


def cmd_tune_run(
    space: Annotated[str, typer.Argument(help="The space file (*.space.toml), naming its recipe.")],
    dir_: Annotated[str, typer.Option("--dir", help="The tune directory (trials, storage, reproductions).")],
    trials: Annotated[int, typer.Option(min=1, help="Trials the study should have (complete, pruned or failed; "
                                                    "all workers together).")] = 20,
    storage: Annotated[str | None, typer.Option(help="Database URL shared by workers on several machines "
                                                     "(postgresql://user:pw@host/db); default: the journal "
                                                     "file in --dir.")] = None,
    worker: Annotated[bool, typer.Option("--worker", help="Join the study as one more worker: no reproductions "
                                                          "(the command without --worker does them).")] = False,
    reproductions: Annotated[int, typer.Option(min=0, help="Retrain the best configuration on the plain recipe "
                                                           "(its training split) with N seeds and evaluate on "
                                                           "the test classes (mean ± 95% CI).")] = 0,
    set_: Annotated[list[str] | None, typer.Option("--set", help="section.key=value for every run "
                                                                 "(repeatable).")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu or cuda for every run.")] = None,
    nproc_per_node: Annotated[int, typer.Option("--nproc-per-node", min=1,
                                                help="Run every fold and reproduction as a torchrun job of N "
                                                     "processes (one machine, --standalone).")] = 1,
    study: Annotated[str | None, typer.Option(help="The study's name in the storage, so one database holds several "
                                                   "(default: the name --dir records, else dmlplug-tune).")] = None,
) -> None:
    """Search the space with k-fold cross-validation on the training classes; resumable, shareable by workers."""
    from dmlplug_builtins.tune.study import require_engine
    from dmlplug_builtins.tune.tune import tune

    require_engine("dmlplug tune run", storage)

    tune(space, dir_, trials=trials, registry=_registry(), storage=storage, overrides=list(set_ or []),
         device=device, reproductions=0 if worker else reproductions, echo=typer.echo,
         nproc_per_node=nproc_per_node, study_name=study)


def cmd_tune_validate(
    space: Annotated[str, typer.Argument(help="The space file (*.space.toml).")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="section.key=value (repeatable).")] = None,
) -> None:
    """Check a space file against its recipe (keys, bounds, every combination of values) without running anything."""
    from dmlplug_builtins.tune.protocol import check_search
    from dmlplug_builtins.tune.space import load_space

    loaded = load_space(space, registry=_registry())
    check_search(loaded, list(set_ or []))
    typer.echo(f"{space}: OK ({len(loaded.params)} parameters, recipe {loaded.recipe_path})")


def _registry() -> Any:
    """The registry of the plugin host running the command (where a space's sampler and pruner are looked up)."""
    import dmlplug

    return dmlplug.plugin_host().registry


def cmd_tune_report(
    dirs: Annotated[list[str], typer.Argument(help="Tune directories; several give a side-by-side table.")],
    storage: Annotated[str | None, typer.Option(help="The database URL the study is in (default: the journal "
                                                     "file of each directory).")] = None,
    out: Annotated[str | None, typer.Option(help="Folder of the report files (default: DIR/report).")] = None,
) -> None:
    """Best configuration as a recipe, the trials table, importances, history and parallel-coordinate PNGs."""
    from dmlplug_builtins.tune.report import write_report
    from dmlplug_builtins.tune.study import require_engine

    require_engine("dmlplug tune report", storage)
    typer.echo(write_report(dirs, storage=storage, out=out))


def cmd_sweep_run(
    target: Annotated[str, typer.Argument(help="A sweep file (NAME.sweep.toml: recipe, seeds, values) or a "
                                               "recipe (with --grid).")],
    dir_: Annotated[str, typer.Option("--dir", help="The sweep directory (runs/<configuration>/seed-S, the "
                                                    "journal file).")],
    grid: Annotated[list[str] | None, typer.Option("--grid", help="KEY=V1,V2,... : values of a recipe key "
                                                                  "(repeatable; added to the file's grid).")]
    = None,
    seeds: Annotated[str | None, typer.Option(help="Comma-separated run seeds (replace the file's; "
                                                   "default 0).")] = None,
    storage: Annotated[str | None, typer.Option(help="Database URL shared by workers on several machines "
                                                     "(postgresql://user:pw@host/db); default: the journal "
                                                     "file in --dir.")] = None,
    worker: Annotated[bool, typer.Option("--worker", help="Join as one more worker: stop when no run is left to "
                                                          "take, without waiting for the others.")] = False,
    set_: Annotated[list[str] | None, typer.Option("--set", help="section.key=value for every run "
                                                                 "(repeatable).")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu or cuda for every run.")] = None,
    study: Annotated[str | None, typer.Option(help="The study's name in the storage, so one database holds several "
                                                   "(default: the name --dir records, else dmlplug-sweep).")] = None,
) -> None:
    """Train a recipe over a grid of values and seeds, each run once; resumable, shareable by workers."""
    from dmlplug_builtins.tune.study import require_engine
    from dmlplug_builtins.tune.sweep import sweep

    require_engine("dmlplug sweep run", storage)
    sweep(target, dir_, grid=list(grid or []), seeds=seeds, storage=storage, overrides=list(set_ or []),
          device=device, worker=worker, echo=typer.echo, study_name=study)


def cmd_sweep_validate(
    target: Annotated[str, typer.Argument(help="A sweep file (NAME.sweep.toml) or a recipe (with --grid).")],
    grid: Annotated[list[str] | None, typer.Option("--grid", help="KEY=V1,V2,... (repeatable).")] = None,
    seeds: Annotated[str | None, typer.Option(help="Comma-separated run seeds.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="section.key=value (repeatable).")] = None,
) -> None:
    """Check a grid against its recipe (keys, the fields' bounds, every value) without running anything."""
    from dmlplug_builtins.tune.sweep import load_grid

    checked = load_grid(target, list(grid or []), seeds, list(set_ or []))
    typer.echo(f"{target}: OK ({len(checked.configurations())} configurations x {len(checked.seeds)} seeds, "
               f"recipe {checked.recipe_path})")


def cmd_sweep_report(
    sweep_dir: Annotated[str, typer.Argument(help="The sweep directory.")],
    storage: Annotated[str | None, typer.Option(help="The database URL the sweep is in (default: the journal "
                                                     "file of the directory).")] = None,
    out: Annotated[str | None, typer.Option(help="Folder of the report files (default: DIR/report).")] = None,
) -> None:
    """Per configuration each metric's mean ± t-based 95% CI over seeds, and the best one as a recipe."""
    from dmlplug_builtins.tune.study import require_engine
    from dmlplug_builtins.tune.sweep_report import write_report

    require_engine("dmlplug sweep report", storage)
    typer.echo(write_report(sweep_dir, storage=storage, out=out))
