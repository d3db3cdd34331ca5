"""The retrieval evaluators: recall@k, MAP@R, R-precision, mAP@k and mAP@C averaged over queries or classes.

The per-query values come from :func:`dmlplug.evaluation.retrieval.per_query_metrics` (defined there, with the
notation); this module averages them and writes the per-class table.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.evaluation import EvalContext
from dmlplug.evaluation.retrieval import per_query_metrics, spec_depth, spec_key


class RetrievalEvaluator:
    """Evaluator for a fixed list of retrieval metric specs (shared by every retrieval plugin).

    Args:
        specs: Metric specs (see :func:`per_query_metrics`).
        average: ``"queries"`` (mean over kept queries) or ``"classes"`` (mean of per-class means).
        per_class: Write a per-class CSV of every metric with :meth:`write_artifacts`.
        name: Evaluator name, used in artifact file names.
    """

    def __init__(self, specs: Sequence[tuple[str, Any]], *, average: str = "queries",
                 per_class: bool = False, name: str = "retrieval"):
        self.specs = list(specs)
        self.average = average
        self.per_class = per_class
        self.name = name

    def required_k(self, eval_context: EvalContext) -> np.ndarray:
        """Neighbours this evaluator needs per kept query, so the shared graph is searched only once."""
        need = np.zeros(len(eval_context.knn_queries), dtype=np.int64)
        for spec in self.specs:
            need = np.maximum(need, spec_depth(eval_context, spec))
        return need

    def evaluate(self, eval_context: EvalContext) -> dict[str, float]:
        """Averaged metric values; NaN when no query has a relevant gallery item."""
        if len(eval_context.knn_queries) == 0:
            return {spec_key(s): float("nan") for s in self.specs}
        values = per_query_metrics(eval_context, self.specs)
        if self.average == "classes":
            return {key: float(np.mean(list(eval_context.per_class_mean(v).values()))) for key, v in values.items()}
        return {key: float(v.mean()) for key, v in values.items()}

    def write_artifacts(self, eval_context: EvalContext, directory: Path) -> list[Path]:
        """Per-class CSV (``<name>_per_class.csv``: class, queries, one column per metric) when asked."""
        if not self.per_class or len(eval_context.knn_queries) == 0:
            return []
        values = per_query_metrics(eval_context, self.specs)
        per_class = {key: eval_context.per_class_mean(v) for key, v in values.items()}
        labels = eval_context.query_labels[eval_context.knn_queries]
        classes, counts = np.unique(labels, return_counts=True)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.name}_per_class.csv"
        with path.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["class", "queries", *per_class])
            for c, n in zip(classes, counts, strict=False):
                writer.writerow([int(c), int(n), *(f"{per_class[k][int(c)]:.6f}" for k in per_class)])
        return [path]
