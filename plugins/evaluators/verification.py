"""1:1 verification metrics on pair distances: TAR at given FARs, EER and the ROC curve.

A pair is accepted ("same identity") when its distance is below the threshold. ``tar@far=F`` is the
largest true-accept rate over thresholds whose false-accept rate is at most F: accepting distances
strictly below the ``(⌊F·n_neg⌋+1)``-th smallest negative distance admits at most ``⌊F·n_neg⌋``
negatives, and no larger threshold does. The EER is where FAR and FRR (= 1 − TAR) cross, linearly
interpolated between the two thresholds that bracket the crossing.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.evaluation import EvalContext
from dmlplug.evaluation.pairs import get_pairs


def tar_at_far(pos: np.ndarray, neg: np.ndarray, far: float) -> float:
    """Largest TAR with FAR ≤ ``far`` (accept when distance < threshold)."""
    neg_sorted = np.sort(neg)
    allowed = int(np.floor(far * len(neg_sorted) + 1e-9))
    if allowed >= len(neg_sorted):
        return 1.0
    threshold = neg_sorted[allowed]
    return float(np.count_nonzero(pos < threshold) / len(pos))


def roc_curve(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FAR and TAR for accepting ``distance ≤ t`` at every distinct distance t (ascending).

    Returns:
        ``(thresholds, far, tar)``, starting with a threshold below every distance (FAR = TAR = 0).
    """
    thresholds = np.unique(np.concatenate([pos, neg]))
    pos_sorted, neg_sorted = np.sort(pos), np.sort(neg)
    tar = np.searchsorted(pos_sorted, thresholds, side="right") / len(pos_sorted)
    far = np.searchsorted(neg_sorted, thresholds, side="right") / len(neg_sorted)
    below = thresholds[0] - 1.0 if len(thresholds) else 0.0
    return (np.concatenate([[below], thresholds]), np.concatenate([[0.0], far]),
            np.concatenate([[0.0], tar]))


def equal_error_rate(pos: np.ndarray, neg: np.ndarray) -> float:
    """Error rate where FAR equals FRR, interpolated between the bracketing thresholds."""
    _, far, tar = roc_curve(pos, neg)
    frr = 1.0 - tar
    diff = far - frr  # increasing: from −1 (accept nothing) to +1 (accept everything)
    j = int(np.argmax(diff >= 0))
    if j == 0:
        return float(far[0])
    i = j - 1
    step = (far[j] - far[i]) - (frr[j] - frr[i])
    s = (frr[i] - far[i]) / step if step else 0.0
    return float(far[i] + s * (far[j] - far[i]))


def _far_key(far: float) -> str:
    return f"tar@far={far:g}"


class VerificationEvaluator:
    """TAR at given FARs, EER, and the ROC curve as an artifact.

    Args:
        fars: False-accept rates at which to report the TAR.
        pairs: Pair-set options (``mode``, ``max_all_pairs``, ``negative_ratio``, ``max_positives_per_class``).
        roc_points: Most ROC points written to ``roc.csv`` (evenly spread over the curve).
    """

    #: The evaluator's name (metric or table name), set by the factory that builds it.
    name: str

    def __init__(self, fars: list[float], pairs: dict[str, Any], roc_points: int = 2000):
        self.fars = fars
        self.pair_options = pairs
        self.roc_points = roc_points

    def _distances(self, eval_context: EvalContext) -> tuple[np.ndarray, np.ndarray]:
        pairs = get_pairs(eval_context, **self.pair_options)
        return pairs.pos_dist, pairs.neg_dist

    def evaluate(self, eval_context: EvalContext) -> dict[str, float]:
        """``tar@far=…`` for each FAR and ``eer`` (NaN without positive or negative pairs)."""
        pos, neg = self._distances(eval_context)
        keys = [_far_key(f) for f in self.fars] + ["eer"]
        if len(pos) == 0 or len(neg) == 0:
            return dict.fromkeys(keys, float("nan"))
        out = {_far_key(f): tar_at_far(pos, neg, f) for f in self.fars}
        out["eer"] = equal_error_rate(pos, neg)
        return out

    def _roc(self, eval_context: EvalContext) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        pos, neg = self._distances(eval_context)
        if len(pos) == 0 or len(neg) == 0:
            return None
        t, far, tar = roc_curve(pos, neg)
        if len(t) > self.roc_points:
            pick = np.unique(np.linspace(0, len(t) - 1, self.roc_points).round().astype(np.int64))
            t, far, tar = t[pick], far[pick], tar[pick]
        return t, far, tar

    def write_artifacts(self, eval_context: EvalContext, directory: Path) -> list[Path]:
        """``roc.csv`` (threshold, far, tar) and ``roc.png``."""
        roc = self._roc(eval_context)
        if roc is None:
            return []
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "roc.csv"
        with path.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["threshold", "far", "tar"])
            for row in zip(*roc, strict=False):
                writer.writerow([f"{v:.6g}" for v in row])
        figure = self.figures(eval_context)["roc"]
        png = directory / "roc.png"
        figure.savefig(png, dpi=100)
        _close(figure)
        return [path, png]

    def figures(self, eval_context: EvalContext) -> dict[str, Any]:
        """The ROC curve (TAR against FAR, log FAR axis) as a matplotlib figure."""
        from matplotlib.figure import Figure

        roc = self._roc(eval_context)
        fig = Figure(figsize=(5, 4))
        ax = fig.add_subplot()
        if roc is not None:
            _, far, tar = roc
            keep = far > 0
            ax.plot(far[keep], tar[keep])
            ax.set_xscale("log")
        ax.set_xlabel("false accept rate")
        ax.set_ylabel("true accept rate")
        ax.set_title("ROC")
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        return {"roc": fig}


def _close(figure: Any) -> None:
    figure.clear()
