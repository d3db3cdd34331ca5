"""Built-in plugin ``tune``: hyperparameter search with the Reality-Check protocol on Optuna.

It registers

* dataset ``tune_fold``: any registered dataset's training classes dealt into ``k`` class-disjoint folds, fold
  ``i`` validating (its test classes are dropped: a search never sees them);
* tune samplers ``tpe``, ``random``, ``cmaes``, ``qmc``, ``grid`` (:mod:`.samplers`) and tune pruners ``median``,
  ``percentile``, ``none`` (:mod:`.pruners`), named by a space file's ``[tune] sampler`` and ``pruner``;
* the commands ``dmlplug tune run | validate | report`` and ``dmlplug sweep run | validate | report`` (a grid of
  values and seeds, :mod:`.sweep`), and ``dmlplug validate NAME.space.toml | NAME.sweep.toml`` (hook
  ``validate_file``).

Implementation modules beside this one: :mod:`.folds`, :mod:`.space` (the space file), :mod:`.combinations`
(every combination of values a space can draw, validated), :mod:`.protocol` (what a search cannot honour, refused
before it starts), :mod:`.samplers` and
:mod:`.pruners` (the built-in ones), :mod:`.study` (storage, the study with the space's sampler and pruner, lost
workers), :mod:`.trials` (one trial = k fold runs, pruning), :mod:`.tune` (the loop, reproductions),
:mod:`.launch` (a fold run as a torchrun job), :mod:`.report`, :mod:`.grid` (the public grid engine: a fixed grid
of runs on a study, for ``sweep`` and other plugins' commands such as ``oodml run --worker``), :mod:`.sweep`,
:mod:`.sweep_report` and :mod:`.commands`.
Neither torch nor optuna is imported here. See docs/tune.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, model_validator

from dmlplug import BuildContext, ComponentTable, Params, TableOf, hookimpl
from dmlplug.protocols import Register


class FoldParams(Params):
    """Parameters of dataset ``tune_fold``."""

    folds: int = Field(4, ge=2, description="Number of class-disjoint folds of the training classes.")
    fold: int = Field(0, ge=0, description="The validation fold (0 .. folds-1); the others train.")
    seed: int = Field(0, ge=0, description="Seed of the assignment of classes to folds.")
    dataset: Annotated[ComponentTable, TableOf("datasets")] = Field(
        description='The wrapped dataset\'s table, e.g. {name = "glyphs", num_classes = 40}; its training (and '
                    'validation) classes are dealt into the folds, its test classes dropped.')

    @model_validator(mode="after")
    def _fold_in_range(self) -> FoldParams:
        if self.fold >= self.folds:
            raise ValueError(f"fold = {self.fold} is not below folds = {self.folds} (folds count from 0)")
        return self

    def extra_tags(self) -> tuple[str, ...]:
        """The wrapped dataset's capabilities."""
        return (*self.dataset.info.tags, *self.dataset.params.extra_tags())

    def extra_requires(self) -> tuple[str, ...]:
        """The wrapped dataset's requirements."""
        return (*self.dataset.info.requires, *self.dataset.params.extra_requires())

    def has_validation_split(self) -> bool:
        """Always: the fold."""
        return True


def build_tune_fold(params: FoldParams, ctx: BuildContext) -> Any:
    """Build the wrapped dataset and keep fold ``fold`` of its training classes for validation."""
    from dmlplug_builtins.tune.folds import select_fold

    bundle = ctx.build("dataset", params.dataset, where="data.dataset.dataset")
    return select_fold(bundle, params.folds, params.fold, params.seed)


@hookimpl
def register_datasets(register: Register) -> None:
    """Register ``tune_fold``."""
    register("tune_fold", build_tune_fold, params=FoldParams,
             description="Any dataset's training classes in k class-disjoint folds; fold i validates, the others "
                         "train, the test classes are dropped (dmlplug tune).")


@hookimpl
def register_tune_samplers(register: Register) -> None:
    """Register the Optuna samplers ``tpe``, ``random``, ``cmaes``, ``qmc`` and ``grid``."""
    from dmlplug_builtins.tune import samplers

    register("tpe", samplers.build_tpe, params=samplers.TpeParams,
             description="Tree-structured Parzen estimator, multivariate and grouped for conditional spaces; "
                         "with a seed, trial n draws from a seed of its own (resumed searches continue the draws).")
    register("random", samplers.build_random,
             description="Independent uniform draws; with a seed, trial n draws from a seed of its own.")
    register("cmaes", samplers.build_cmaes, description="CMA-ES over the numeric keys (the others at random).")
    register("qmc", samplers.build_qmc, description="Quasi-Monte Carlo: the points of a Sobol sequence.")
    register("grid", samplers.build_grid,
             description="Every combination of the choices once (categorical parameters only).")


@hookimpl
def register_tune_pruners(register: Register) -> None:
    """Register the Optuna pruners ``median``, ``percentile`` and ``none``."""
    from dmlplug_builtins.tune import pruners

    register("median", pruners.build_median, params=pruners.MedianParams,
             description="Stops a trial below the median of the others at the same step (the running fold mean).")
    register("percentile", pruners.build_percentile, params=pruners.PercentileParams,
             description="Stops a trial below a percentile of the others at the same step.")
    register("none", pruners.build_none, description="Never stops a trial.")


@hookimpl
def register_commands(app: Any) -> None:
    """Add ``dmlplug tune run | validate | report``."""
    import typer

    from dmlplug_builtins.tune import commands

    group = typer.Typer(help="Hyperparameter search with the Reality-Check protocol on Optuna (docs/tune.md).",
                        no_args_is_help=True)
    group.command("run")(commands.cmd_tune_run)
    group.command("validate")(commands.cmd_tune_validate)
    group.command("report")(commands.cmd_tune_report)
    app.add_typer(group, name="tune")
    sweep = typer.Typer(help="A recipe over a grid of values and seeds on the engine of `dmlplug tune` "
                             "(docs/tune.md).", no_args_is_help=True)
    sweep.command("run")(commands.cmd_sweep_run)
    sweep.command("validate")(commands.cmd_sweep_validate)
    sweep.command("report")(commands.cmd_sweep_report)
    app.add_typer(sweep, name="sweep")


@hookimpl
def validate_file(path: Path, overrides: list[str], registry: Any) -> str | None:
    """``dmlplug validate NAME.space.toml`` or ``NAME.sweep.toml``: check a space or grid against its recipe."""
    if path.name.endswith(".sweep.toml"):
        from dmlplug_builtins.tune.sweep import load_grid

        grid = load_grid(path, overrides=list(overrides))
        return f"sweep of {len(grid.configurations())} configurations x {len(grid.seeds)} seeds over {grid.recipe_path}"
    if not path.name.endswith(".space.toml"):
        return None
    from dmlplug_builtins.tune.protocol import check_search
    from dmlplug_builtins.tune.space import load_space

    space = load_space(path, registry=registry)
    check_search(space, list(overrides))  # what `dmlplug tune validate` and `tune run` check
    return f"search space of {len(space.params)} parameters over {space.recipe_path}"
