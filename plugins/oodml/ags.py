"""AGS, the Aggregated Generalisation Score of the ooDML benchmark (docs/oodml.md)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dmlplug.errors import DataError


def normalized_fids(fids: Sequence[float]) -> np.ndarray:
    """Min–max normalise split FIDs to ``[0, 1]`` (same order as given).

    Raises:
        DataError: Fewer than two FIDs, non-finite values, or all FIDs equal (no range to normalise).
    """
    values = np.asarray(fids, dtype=np.float64)
    if values.ndim != 1 or len(values) < 2:
        raise DataError(f"AGS needs at least two splits, got {values.size}",
                        fix="run (or summarise) a sweep over two or more ooDML splits")
    if not np.isfinite(values).all():
        raise DataError("split FIDs contain NaN or infinite values", fix="check the split file")
    low, high = values.min(), values.max()
    if high == low:
        raise DataError(f"every split has the same FID ({low}); AGS needs a range of FIDs",
                        fix="use splits of different difficulty")
    return (values - low) / (high - low)


def ags(fids: Sequence[float], scores: Sequence[float]) -> float:
    """Area under the metric-vs-normalised-FID curve, by the trapezoidal rule.

    The FIDs are min–max normalised to ``[0, 1]`` and the points are ordered by FID, so the score is in
    the units of ``scores`` (e.g. recall@1 in %, averaged over seeds by the caller) and equals the score
    itself for a flat curve.

    Args:
        fids: FID of every split.
        scores: Metric of every split, aligned with ``fids``.

    Returns:
        The AGS as a Python float.

    Raises:
        DataError: Lengths differ, fewer than two splits, non-finite values or no FID range.
    """
    points = np.asarray(scores, dtype=np.float64)
    x = normalized_fids(fids)
    if points.shape != x.shape:
        raise DataError(f"{len(x)} FIDs but {points.size} scores; they must be aligned split by split")
    if not np.isfinite(points).all():
        raise DataError("AGS scores contain NaN or infinite values",
                        fix="check that every split has finished runs with this metric")
    order = np.argsort(x, kind="stable")
    x, points = x[order], points[order]
    # Explicit trapezoids: np.trapz was renamed np.trapezoid in numpy 2, and the sum is one line anyway.
    return float(np.sum(np.diff(x) * (points[1:] + points[:-1]) / 2.0))
