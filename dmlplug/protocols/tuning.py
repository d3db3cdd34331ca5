"""The contract of the tuning kinds: Optuna samplers and pruners (``[tune] sampler``, ``[tune] pruner``).

Their factories return Optuna objects (``optuna.samplers.BaseSampler``, ``optuna.pruners.BasePruner``); these
protocols list the members ``dmlplug tune`` and Optuna call, so a component is checked when it is built.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class TuneSampler(Protocol):
    """An Optuna sampler: chooses each trial's values (``[tune] sampler = "tpe"``).

    The factory reads ``ctx.seed`` (``[tune] sampler_seed``, ``None`` for fresh randomness) and may read
    ``ctx.require("search_space")``: the searched keys as Optuna distributions (a grid needs their choices).
    """

    def infer_relative_search_space(self, study: Any, trial: Any) -> Any:
        """The parameters sampled together (Optuna's ``BaseSampler`` contract)."""

    def sample_relative(self, study: Any, trial: Any, search_space: Any) -> Any:
        """Values of the relative search space for ``trial``."""

    def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
        """One value of ``param_name`` for ``trial``."""


@runtime_checkable
class TunePruner(Protocol):
    """An Optuna pruner: stops unpromising trials (``[tune] pruner = "median"``).

    Steps are trial-epochs counted from 1 (or whole folds with ``[tune] prune_at = "fold"``); the value reported
    at a step is the running mean of the folds.
    """

    def prune(self, study: Any, trial: Any) -> bool:
        """Whether ``trial`` should stop now."""
