"""Run several evaluators on one context and merge their metrics."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dmlplug.errors import ComponentError
from dmlplug.evaluation.context import EvalContext
from dmlplug.protocols import HasFigures, HasRequiredK, WritesArtifacts

#: Key under which the number of lone queries is reported whenever a kNN evaluator ran.
EXCLUDED_KEY = "excluded_queries"


def run_evaluators(evaluators: Iterable[Any], eval_context: EvalContext) -> dict[str, float]:
    """Evaluate every evaluator on ``eval_context`` and merge their metric dicts.

    Evaluators that define ``required_k(eval_context)`` are asked first, so the kNN graph is searched once with
    the largest k any of them needs. When a kNN evaluator ran (one with ``required_k``) or any metric used
    the kNN graph, the number of lone queries left out of the kNN metrics is added as ``excluded_queries``
    (also when it is 0, and also when every query is lone: then the kNN metrics are NaN and a warning says
    why; ``dmlplug evaluate`` and the engine refuse that case before calling this).

    Raises:
        ComponentError: Two evaluators produce the same metric name.
    """
    evaluators = list(evaluators)
    knn_evaluators = [e for e in evaluators if isinstance(e, HasRequiredK)]
    for evaluator in knn_evaluators:
        eval_context.request_k(evaluator.required_k(eval_context))
    if knn_evaluators and len(eval_context.knn_queries) == 0:
        warnings.warn(f"no valid query: none of the {eval_context.num_queries} queries has another item of its class "
                      f"in the gallery (excluded_queries = {eval_context.excluded_queries}), so every kNN metric "
                      "is NaN",
                      RuntimeWarning, stacklevel=2)
    metrics: dict[str, float] = {}
    owner: dict[str, str] = {}
    for evaluator in evaluators:
        name = getattr(evaluator, "name", type(evaluator).__name__)
        for key, value in evaluator.evaluate(eval_context).items():
            if key in metrics:
                raise ComponentError(
                    f"metric {key!r} is produced by two evaluators ({owner[key]!r} and {name!r})",
                    where="evaluators",
                    fix="remove one of them, or give them parameters that produce different metrics",
                )
            metrics[key] = float(value)
            owner[key] = name
    if eval_context.knn_used or knn_evaluators:
        if EXCLUDED_KEY in metrics:
            raise ComponentError(f"an evaluator produces the reserved metric name {EXCLUDED_KEY!r}",
                                 where=f"evaluator {owner[EXCLUDED_KEY]!r}", fix="rename that metric")
        metrics[EXCLUDED_KEY] = float(eval_context.excluded_queries)
    return metrics


def write_all_artifacts(evaluators: Iterable[Any], eval_context: EvalContext, directory: Path) -> list[Path]:
    """Call ``write_artifacts(eval_context, directory)`` on every evaluator that has it; returns the files written.

    The engine calls it once, after the last evaluation of a run (rank 0 only).
    """
    written: list[Path] = []
    for evaluator in evaluators:
        if isinstance(evaluator, WritesArtifacts):
            written.extend(evaluator.write_artifacts(eval_context, Path(directory)) or [])  # None: wrote nothing listed
    return written


def collect_figures(evaluators: Iterable[Any], eval_context: EvalContext) -> dict[str, Any]:
    """Merge the ``figures(eval_context)`` dicts of the evaluators that have one (for the TensorBoard logger)."""
    figures: dict[str, Any] = {}
    for evaluator in evaluators:
        if isinstance(evaluator, HasFigures):
            figures.update(evaluator.figures(eval_context))
    return figures
