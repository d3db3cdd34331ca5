"""How metric values are shown to people, in one place: fractions in [0, 1] with four decimals.

``dmlplug report``, ``dmlplug oodml summarize`` and ``dmlplug fewshot`` all print through these functions, so a
recall@1 reads the same everywhere (``0.6123``, never ``61.23``), and a spread is shown only where there is one:
a single seed or episode has no standard deviation, so it gets none rather than ``± 0.0000``.
"""

from __future__ import annotations

import math

DECIMALS = 4


def format_value(value: float | None) -> str:
    """``0.61234`` -> ``"0.6123"``; ``None`` or NaN -> ``"–"``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{DECIMALS}f}"


def format_mean_spread(mean: float | None, spread: float | None, count: int) -> str:
    """``"mean ± spread"`` over ``count`` values; the mean alone for one value, ``"–"`` for none.

    Args:
        mean: The mean.
        spread: Standard deviation or confidence half-width; ignored (and may be None or NaN) when ``count`` < 2.
        count: How many values the mean is over.
    """
    if count == 0 or mean is None:
        return "–"
    if count == 1 or spread is None or (isinstance(spread, float) and math.isnan(spread)):
        return format_value(mean)
    return f"{format_value(mean)} ± {format_value(spread)}"
