"""The built-in tune samplers (``[tune] sampler``): tpe, random, cmaes, qmc and grid, on Optuna's samplers.

Each factory reads ``ctx.seed`` (``[tune] sampler_seed``; ``None``: fresh randomness); ``grid`` also reads
``ctx.require("search_space")``, the searched keys as Optuna distributions. Optuna is imported inside the
factories: registering them needs none.

With a seed, ``tpe`` and ``random`` draw each trial's values from a seed of its own, derived from the seed and the
trial's number (:func:`trial_sampler`): a restarted command or a second worker, each opening the study with the
same seed, would otherwise repeat the first process's draws; so trial ``n`` gets the same values whichever
process runs it, and a search resumed after anything samples what an uninterrupted one would have.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable
from typing import Any

from pydantic import Field

from dmlplug import BuildContext, Params
from dmlplug.errors import RunError


class TpeParams(Params):
    """Parameters of the tune sampler ``tpe``."""

    startup_trials: int = Field(10, ge=0, description="Trials TPE draws at random before its model chooses "
                                "(Optuna's n_startup_trials; its default is 10); with a budget of few trials, lower "
                                "it or TPE never models the space.")


def build_tpe(params: TpeParams, ctx: BuildContext) -> Any:
    """Optuna's TPE, multivariate and grouped (for conditional spaces), seeded per trial when seeded."""
    import optuna

    def tpe(trial_seed: int | None) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # group: stable since 2.8
            return optuna.samplers.TPESampler(seed=trial_seed, multivariate=True, group=True,
                                              n_startup_trials=params.startup_trials)

    return tpe(None) if ctx.seed is None else trial_sampler(tpe, ctx.seed)


def build_random(params: Params, ctx: BuildContext) -> Any:
    """Optuna's random sampler, seeded per trial when seeded."""
    import optuna

    if ctx.seed is None:
        return optuna.samplers.RandomSampler()
    return trial_sampler(lambda trial_seed: optuna.samplers.RandomSampler(seed=trial_seed), ctx.seed)


def build_cmaes(params: Params, ctx: BuildContext) -> Any:
    """Optuna's CMA-ES sampler."""
    import optuna

    return optuna.samplers.CmaEsSampler(seed=ctx.seed)


def build_qmc(params: Params, ctx: BuildContext) -> Any:
    """Optuna's quasi-Monte Carlo sampler."""
    import optuna

    return optuna.samplers.QMCSampler(seed=ctx.seed)


def build_grid(params: Params, ctx: BuildContext) -> Any:
    """Optuna's grid sampler over the choices of the searched keys.

    Raises:
        RunError: A searched key is a range, not a list of choices.
    """
    import optuna
    from optuna.distributions import CategoricalDistribution

    grid = {}
    for key, distribution in ctx.require("search_space").items():
        if not isinstance(distribution, CategoricalDistribution):
            kind = "int" if isinstance(distribution, optuna.distributions.IntDistribution) else "float"
            raise RunError(f"the grid sampler needs categorical parameters only; {key} is a {kind} range",
                           where=f'params."{key}"', fix="list its values as choices")
        grid[key] = list(distribution.choices)

    class Grid(optuna.samplers.GridSampler):
        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            # Optuna's stops the study once the grid is visited, which raises outside study.optimize (a study
            # driven by ask and tell); dmlplug tune caps --trials at the grid's size itself.
            pass

    return Grid(grid, seed=ctx.seed)


def trial_sampler(make: Callable[[int], Any], seed: int) -> Any:
    """A sampler that asks ``make(the trial's seed)`` for each trial's values.

    Right for TPE and random search, which keep no state of their own between trials (what TPE learns is in the
    study's trials); the trial's seed is a hash of ``seed`` and its number.
    """
    import optuna

    class PerTrialSeeded(optuna.samplers.BaseSampler):
        def __init__(self) -> None:
            self._samplers: dict[int, Any] = {}

        def _of(self, trial: Any) -> Any:
            number = int(trial.number)
            if number not in self._samplers:
                digest = hashlib.sha256(f"dmlplug-tune:{seed}:{number}".encode()).digest()
                self._samplers = {number: make(int.from_bytes(digest[:4], "little"))}  # only the current trial's
            return self._samplers[number]

        def infer_relative_search_space(self, study: Any, trial: Any) -> Any:
            return self._of(trial).infer_relative_search_space(study, trial)

        def sample_relative(self, study: Any, trial: Any, search_space: Any) -> Any:
            return self._of(trial).sample_relative(study, trial, search_space)

        def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
            return self._of(trial).sample_independent(study, trial, param_name, param_distribution)

        def before_trial(self, study: Any, trial: Any) -> None:
            self._of(trial).before_trial(study, trial)

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            self._of(trial).after_trial(study, trial, state, values)

        def reseed_rng(self) -> None:  # the seeds are the trials' own
            pass

    return PerTrialSeeded()
