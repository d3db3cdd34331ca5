"""The row-norm bounds of the exact kNN search's error bound, and the finiteness check of EvalContext.

The norms are summed in float32 and raised by their worst-case rounding error; they must never be below the
true norms (the certified error bound of :func:`dmlplug.evaluation.knn.exact_knn` rests on that), whatever
the scale of the values: subnormal squares, ordinary ones, and squares that overflow float32.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dmlplug.errors import RunError
from dmlplug.evaluation import EvalContext
from dmlplug.evaluation.knn_search import row_norms


def _true_norm(row: np.ndarray) -> float:
    """The exact norm of a float32 row (rational arithmetic), as a float."""
    return math.sqrt(float(sum(Fraction(float(v)) ** 2 for v in row)))


@pytest.mark.parametrize("scale", [1e-25, 1e-20, 1e-3, 1.0, 1e3, 1e18, 1e20])
@pytest.mark.parametrize("dim", [1, 7, 128, 512])
def test_row_norms_are_upper_bounds_within_the_rounding_error(scale, dim):
    rng = np.random.default_rng(dim)
    x = (rng.standard_normal((40, dim)) * scale).astype(np.float32)
    x[0] = x[1]  # duplicate rows are fine
    bounds = row_norms(x)
    for row, bound in zip(x, bounds, strict=True):
        exact = _true_norm(row)
        assert bound >= exact
        assert bound <= exact * (1 + 1e-4) + 1e-21  # tight: about D·u relative, plus the subnormal slack


def test_non_finite_embeddings_are_refused():
    x = np.ones((5, 3), dtype=np.float32)
    for bad in (np.nan, np.inf, -np.inf):
        y = x.copy()
        y[3, 1] = bad
        with pytest.raises(RunError, match="NaN or infinite"):
            EvalContext(y, np.arange(5))
    y = x.copy()
    y[1, 0], y[2, 0] = np.inf, -np.inf  # their sum is NaN, still caught
    with pytest.raises(RunError):
        EvalContext(y, np.arange(5))
    big = np.full((5, 3), 3e38, dtype=np.float32)  # finite values whose float32 sum overflows: accepted
    EvalContext(big, np.arange(5))
