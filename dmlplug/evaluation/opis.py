"""OPIS and ε-OPIS: how consistent the per-class utility of one distance threshold is (TCM paper).

For class i and distance threshold d: sensitivity ψ_i(d) = share of the class's positive pairs with
distance ≤ d, specificity φ_i(d) = share of its negative pairs with distance > d, utility
``U_i = 2φψ/(φ+ψ)`` (0 when both are 0; the TCM paper, Zhang et al. 2023, uses the factor 2 everywhere).
The calibration range [d_min, d_max] is where the FAR over all negative pairs goes from ``far_range[0]`` to
``far_range[1]``.
On the grid ``d_j = d_min + j·(d_max−d_min)/N`` (j = 1..N):

* ``opis = mean_j Var_i U_i(d_j)`` (population variance over classes; eq. 2, Riemann mean, without the
  stray N/(d_max−d_min) factor of the paper's Algorithm 1).
* ``eps_opis = mean_j (U_worst(d_j) − U_best(d_j))²`` where best/worst are the ε share of classes with
  the highest/lowest mean utility over the grid, pooled by averaging their φ and ψ (or their pair counts).

Classes need at least one positive and one negative pair to take part.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dmlplug.evaluation.context import EvalContext
from dmlplug.evaluation.pairs import PairSet, get_pairs


def utility(specificity: np.ndarray, sensitivity: np.ndarray, kind: str = "roc") -> np.ndarray:
    """Utility of a threshold from specificity φ and sensitivity ψ.

    Args:
        specificity: φ = 1 − FAR.
        sensitivity: ψ = TAR.
        kind: ``"roc"``: harmonic mean ``2φψ/(φ+ψ)``; ``"pr"``: F1 of precision and recall for balanced
            pairs, with precision ``ψ / (ψ + 1 − φ)``.
    """
    phi = np.asarray(specificity, dtype=np.float64)
    psi = np.asarray(sensitivity, dtype=np.float64)
    if kind == "pr":
        denom = psi + 1.0 - phi
        phi = np.divide(psi, denom, out=np.zeros_like(psi), where=denom > 0)  # precision
    elif kind != "roc":
        raise ValueError(f"unknown utility {kind!r}")
    total = phi + psi
    return np.divide(2.0 * phi * psi, total, out=np.zeros_like(total), where=total > 0)


@dataclass
class UtilityCurves:
    """Per-class rates on the threshold grid.

    Attributes:
        grid: The N thresholds.
        classes: Original labels of the classes taking part (T).
        pos_counts: Positive pairs per class (T).
        neg_counts: Negative pairs per class (T).
        pos_below: Positive pairs with distance ≤ d_j (T×N).
        neg_below: Negative pairs with distance ≤ d_j (T×N).
        d_range: (d_min, d_max).
        kind: Utility kind.
    """

    grid: np.ndarray
    classes: np.ndarray
    pos_counts: np.ndarray
    neg_counts: np.ndarray
    pos_below: np.ndarray
    neg_below: np.ndarray
    d_range: tuple[float, float]
    kind: str

    @property
    def sensitivity(self) -> np.ndarray:
        """ψ (T×N)."""
        return self.pos_below / self.pos_counts[:, None]

    @property
    def specificity(self) -> np.ndarray:
        """φ (T×N)."""
        return 1.0 - self.neg_below / self.neg_counts[:, None]

    @property
    def utility(self) -> np.ndarray:
        """U (T×N)."""
        return utility(self.specificity, self.sensitivity, self.kind)


def calibration_range(neg_dist: np.ndarray, far_range: tuple[float, float]) -> tuple[float, float]:
    """Distances at which the FAR over the negative pairs equals ``far_range`` (linear quantiles)."""
    low, high = np.quantile(neg_dist, [far_range[0], far_range[1]])
    return float(low), float(high)


def utility_curves(pairs: PairSet, *, grid_size: int = 100, far_range: tuple[float, float] = (1e-2, 1e-1),
                   distance_range: tuple[float, float] | None = None, kind: str = "roc") -> UtilityCurves:
    """Count, per class and grid threshold, the pairs at or below the threshold (one pass over pairs)."""
    num_classes = len(pairs.classes)
    if distance_range is None:
        if len(pairs.neg_dist) == 0:
            raise ValueError("OPIS needs negative pairs to set the calibration range")
        distance_range = calibration_range(pairs.neg_dist, far_range)
    d_min, d_max = distance_range
    grid = d_min + (d_max - d_min) * np.arange(1, grid_size + 1) / grid_size
    pos_hist = _histogram(pairs.pos_dist, pairs.pos_class, grid, num_classes)
    neg_hist = _histogram(pairs.neg_dist, pairs.neg_class_a, grid, num_classes)
    second = pairs.neg_class_b >= 0
    if second.any():
        neg_hist += _histogram(pairs.neg_dist[second], pairs.neg_class_b[second], grid, num_classes)
    pos_counts, neg_counts = pos_hist.sum(1), neg_hist.sum(1)
    keep = (pos_counts > 0) & (neg_counts > 0)
    # Pairs in bin b have grid[b-1] < d ≤ grid[b]; the last bin holds d > grid[-1].
    pos_below = np.cumsum(pos_hist[keep, :grid_size], axis=1)
    neg_below = np.cumsum(neg_hist[keep, :grid_size], axis=1)
    return UtilityCurves(grid, pairs.classes[keep], pos_counts[keep], neg_counts[keep], pos_below,
                         neg_below, (float(d_min), float(d_max)), kind)


def _histogram(dist: np.ndarray, cls: np.ndarray, grid: np.ndarray, num_classes: int) -> np.ndarray:
    bins = np.searchsorted(grid, dist, side="left")  # first grid point ≥ d
    flat = cls.astype(np.int64) * (len(grid) + 1) + bins
    counts = np.bincount(flat, minlength=num_classes * (len(grid) + 1))
    return counts.reshape(num_classes, len(grid) + 1).astype(np.float64)


def opis_value(curves: UtilityCurves) -> float:
    """Mean over the grid of the across-class population variance of the utility."""
    if len(curves.classes) == 0:
        return float("nan")
    return float(curves.utility.var(axis=0).mean())


def eps_opis_value(curves: UtilityCurves, epsilon: float = 0.1, pooling: str = "average") -> float:
    """Mean squared gap between the pooled utility of the ε worst and ε best classes.

    Args:
        curves: Per-class curves.
        epsilon: Share of classes in each group (at least one class).
        pooling: ``"average"``: mean of the per-class φ and ψ; ``"pairs"``: rates of the pooled pair counts.
    """
    num = len(curves.classes)
    if num == 0:
        return float("nan")
    size = max(1, min(num, math.ceil(epsilon * num - 1e-9)))
    order = np.argsort(curves.utility.mean(axis=1), kind="stable")
    worst, best = order[:size], order[num - size:]
    return float(np.mean((_pooled(curves, worst, pooling) - _pooled(curves, best, pooling)) ** 2))


def _pooled(curves: UtilityCurves, group: np.ndarray, pooling: str) -> np.ndarray:
    if pooling == "average":
        phi = curves.specificity[group].mean(0)
        psi = curves.sensitivity[group].mean(0)
    elif pooling == "pairs":
        psi = curves.pos_below[group].sum(0) / curves.pos_counts[group].sum()
        phi = 1.0 - curves.neg_below[group].sum(0) / curves.neg_counts[group].sum()
    else:
        raise ValueError(f"unknown pooling {pooling!r}")
    return utility(phi, psi, curves.kind)


def context_curves(eval_context: EvalContext, pairs: dict[str, Any],
                   curve_options: dict[str, Any]) -> UtilityCurves | None:
    """Per-class utility curves of ``eval_context``'s pairs, cached in it; ``None`` without negative pairs.

    Args:
        eval_context: The evaluation context.
        pairs: Pair-set options (see :func:`dmlplug.evaluation.pairs.get_pairs`).
        curve_options: ``grid_size``, ``far_range``, ``distance_range`` and ``kind`` of :func:`utility_curves`.
    """
    key = ("opis_curves", tuple(sorted(pairs.items())), tuple(curve_options.items()))
    if key not in eval_context.cache:
        found = get_pairs(eval_context, **pairs)
        if len(found.neg_dist) == 0 and curve_options["distance_range"] is None:
            eval_context.cache[key] = None
        else:
            eval_context.cache[key] = utility_curves(found, **curve_options)
    return eval_context.cache[key]


def opis_metrics(curves: UtilityCurves | None, metrics: list[str], epsilon: float = 0.1,
                 pooling: str = "average") -> dict[str, float]:
    """``opis`` and/or ``eps_opis`` of ``curves`` (NaN when no class has both positive and negative pairs)."""
    out = {}
    if "opis" in metrics:
        out["opis"] = opis_value(curves) if curves is not None else float("nan")
    if "eps_opis" in metrics:
        out["eps_opis"] = eps_opis_value(curves, epsilon, pooling) if curves is not None else float("nan")
    return out
