"""``dmlplug tune run | validate | report``: the search from the command line (docs/tune.md).

The work happens in :mod:`.tune`, :mod:`.space` and :mod:`.report`; they are imported inside the commands so
the CLI starts without torch or optuna.
"""

from __future__ import annotations

from typing import Annotated

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
    reproductions: Annotated[int, typer.Option(min=0, help="Retrain the best configuration on all training "
                                                           "classes with N seeds and evaluate on the test "
                                                           "classes (mean ± 95% CI).")] = 0,
    set_: Annotated[list[str] | None, typer.Option("--set", help="section.key=value for every run "
                                                                 "(repeatable).")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu or cuda for every run.")] = None,
    nproc_per_node: Annotated[int, typer.Option("--nproc-per-node", min=1,
                                                help="Run every fold and reproduction as a torchrun job of N "
                                                     "processes (one machine, --standalone).")] = 1,
) -> None:
    """Search the space with k-fold cross-validation on the training classes; resumable, shareable by workers."""
    from dmlplug_builtins.tune.tune import tune

    tune(space, dir_, trials=trials, storage=storage, overrides=list(set_ or []), device=device,
         reproductions=0 if worker else reproductions, echo=typer.echo, nproc_per_node=nproc_per_node)


def cmd_tune_validate(
    space: Annotated[str, typer.Argument(help="The space file (*.space.toml).")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="section.key=value (repeatable).")] = None,
) -> None:
    """Check a space file against its recipe (keys, bounds, choices) without running anything."""
    from dmlplug_builtins.tune.space import check_space, load_space

    loaded = load_space(space)
    check_space(loaded, list(set_ or []))
    typer.echo(f"{space}: OK ({len(loaded.params)} parameters, recipe {loaded.recipe_path})")


def cmd_tune_report(
    dirs: Annotated[list[str], typer.Argument(help="Tune directories; several give a side-by-side table.")],
    storage: Annotated[str | None, typer.Option(help="The database URL the study is in (default: the journal "
                                                     "file of each directory).")] = None,
    out: Annotated[str | None, typer.Option(help="Folder of the report files (default: DIR/report).")] = None,
) -> None:
    """Best configuration as a recipe, the trials table, importances, history and parallel-coordinate PNGs."""
    from dmlplug_builtins.tune.report import write_report

    typer.echo(write_report(dirs, storage=storage, out=out))
