"""The built-in tune pruners (``[tune] pruner``): median, percentile and none, on Optuna's pruners.

A trial reports the running mean of its folds at steps counted in trial-epochs from 1
(:class:`~dmlplug_builtins.tune.trials.FoldReporter`), so Optuna's ``n_warmup_steps = warmup_epochs`` first prunes
a trial once it has trained ``warmup_epochs`` epochs. Optuna is imported inside the factories.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from dmlplug import BuildContext, Params


class MedianParams(Params):
    """Parameters of the tune pruner ``median``."""

    startup_trials: int = Field(5, ge=0, description="Trials finished before the pruner prunes.")
    warmup_epochs: int = Field(0, ge=0, description="Trial-epochs every trial trains before the pruner may stop "
                               "it (Optuna's n_warmup_steps; the recipe's run.epochs lets every trial finish its "
                               "first fold).")


class PercentileParams(MedianParams):
    """Parameters of the tune pruner ``percentile``."""

    percentile: float = Field(50.0, gt=0, lt=100, description="Trials below this percentile of the others at "
                              "the same step are pruned.")


def build_median(params: MedianParams, ctx: BuildContext) -> Any:
    """Optuna's percentile pruner at 50 (its median pruner)."""
    return _percentile(50.0, params)


def build_percentile(params: PercentileParams, ctx: BuildContext) -> Any:
    """Optuna's percentile pruner."""
    return _percentile(params.percentile, params)


def build_none(params: Params, ctx: BuildContext) -> Any:
    """Optuna's pruner that never prunes."""
    import optuna

    return optuna.pruners.NopPruner()


def _percentile(percentile: float, params: MedianParams) -> Any:
    import optuna

    return optuna.pruners.PercentilePruner(percentile, n_startup_trials=params.startup_trials,
                                          n_warmup_steps=params.warmup_epochs)
