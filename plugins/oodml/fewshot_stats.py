"""Summary statistics of few-shot episodes (docs/fewshot.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def mean_confidence_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Mean and confidence-interval half-width of per-episode results (Student t).

    The half-width is ``sem * t_{(1 + confidence)/2, n-1}`` with ``sem = std(ddof=1) / sqrt(n)``: the
    reference reports ``mean ± half-width`` over its 10 episodes.

    Args:
        values: One result per episode (e.g. recall@1 of each episode).
        confidence: Two-sided confidence level in ``(0, 1)``.

    Returns:
        ``(mean, half_width)``; the half-width is NaN for a single episode (no spread to estimate).

    Raises:
        ValueError: ``values`` is empty or not finite, or ``confidence`` is outside ``(0, 1)``.
    """
    from scipy import stats  # scipy.stats is slow to import; only the few-shot report needs it

    data = np.asarray(values, dtype=np.float64).ravel()
    if data.size == 0:
        raise ValueError("no values to summarise")
    if not np.isfinite(data).all():
        raise ValueError("values contain NaN or infinite entries")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    mean = float(data.mean())
    if data.size == 1:
        return mean, math.nan
    sem = float(data.std(ddof=1)) / math.sqrt(data.size)
    return mean, sem * float(stats.t.ppf((1.0 + confidence) / 2.0, data.size - 1))
