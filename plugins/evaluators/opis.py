"""The ``opis`` and ``eps_opis`` evaluators: OPIS values, per-class utilities and utility curves as artifacts.

The maths (utility curves, OPIS, ε-OPIS, with their definitions) is :mod:`dmlplug.evaluation.opis`, shared with
the bundle's calibration.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.evaluation import EvalContext
from dmlplug.evaluation.opis import UtilityCurves, context_curves, opis_metrics


class OpisEvaluator:
    """``opis`` and/or ``eps_opis`` with per-class utilities and utility curves as artifacts.

    Args:
        metrics: ``["opis"]``, ``["eps_opis"]`` or both.
        pairs: Pair-set options (see :func:`dmlplug.evaluation.pairs.get_pairs`).
        grid_size: Number of thresholds N.
        far_range: FAR range defining the calibration range.
        distance_range: Fixed (d_min, d_max) instead of the FAR-based range.
        kind: Utility: ``"roc"`` or ``"pr"``.
        epsilon: Share of best/worst classes for ε-OPIS.
        pooling: ε-OPIS pooling (``"average"`` or ``"pairs"``).
    """

    #: The evaluator's name (metric or table name), set by the factory that builds it.
    name: str

    def __init__(self, metrics: list[str], pairs: dict[str, Any], grid_size: int,
                 far_range: tuple[float, float], distance_range: tuple[float, float] | None,
                 kind: str = "roc", epsilon: float = 0.1, pooling: str = "average"):
        self.metrics = metrics
        self.pair_options = pairs
        self.curve_options: dict[str, Any] = {"grid_size": grid_size, "far_range": tuple(far_range),
                                              "distance_range": tuple(distance_range) if distance_range else None,
                                              "kind": kind}
        self.epsilon = epsilon
        self.pooling = pooling

    def curves(self, eval_context: EvalContext) -> UtilityCurves | None:
        """Per-class utility curves (cached in the context), ``None`` without negative pairs."""
        return context_curves(eval_context, self.pair_options, self.curve_options)

    def evaluate(self, eval_context: EvalContext) -> dict[str, float]:
        """The requested OPIS values (NaN when no class has both positive and negative pairs)."""
        return opis_metrics(self.curves(eval_context), self.metrics, self.epsilon, self.pooling)

    def write_artifacts(self, eval_context: EvalContext, directory: Path) -> list[Path]:
        """``opis_per_class.csv``, ``opis_curves.json`` (range, grid, per-class utilities) and ``opis.png``."""
        curves = self.curves(eval_context)
        if curves is None or len(curves.classes) == 0:
            return []
        directory.mkdir(parents=True, exist_ok=True)
        u = curves.utility
        table = directory / "opis_per_class.csv"
        with table.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["class", "positive_pairs", "negative_pairs", "mean_utility", "min_utility",
                             "max_utility"])
            for i, c in enumerate(curves.classes):
                writer.writerow([int(c), int(curves.pos_counts[i]), int(curves.neg_counts[i]),
                                 f"{u[i].mean():.6f}", f"{u[i].min():.6f}", f"{u[i].max():.6f}"])
        data = directory / "opis_curves.json"
        data.write_text(json.dumps({
            "distance_range": list(curves.d_range), "grid": curves.grid.tolist(), "utility": curves.kind,
            "classes": [int(c) for c in curves.classes], "per_class_utility": np.round(u, 6).tolist(),
            "mean_utility": np.round(u.mean(0), 6).tolist(),
        }))
        figure = self.figures(eval_context)["opis_utility"]
        png = directory / "opis.png"
        figure.savefig(png, dpi=100)
        figure.clear()
        return [table, data, png]

    def figures(self, eval_context: EvalContext) -> dict[str, Any]:
        """Utility against threshold: every class (up to 300, thin), their mean and the ε groups."""
        from matplotlib.figure import Figure

        curves = self.curves(eval_context)
        fig = Figure(figsize=(6, 4))
        ax = fig.add_subplot()
        if curves is not None and len(curves.classes):
            u = curves.utility
            shown = np.linspace(0, len(u) - 1, min(len(u), 300)).round().astype(int)
            for row in u[np.unique(shown)]:
                ax.plot(curves.grid, row, color="0.6", linewidth=0.5, alpha=0.5)
            ax.plot(curves.grid, u.mean(0), color="C0", linewidth=2, label="mean over classes")
            ax.legend(loc="lower right")
        ax.set_xlabel("distance threshold")
        ax.set_ylabel("utility")
        ax.set_title("Per-class utility in the calibration range")
        fig.tight_layout()
        return {"opis_utility": fig}
