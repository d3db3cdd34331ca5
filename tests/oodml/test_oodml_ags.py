"""AGS (docs/oodml.md) and the few-shot confidence interval (docs/fewshot.md)."""

import numpy as np
import pytest
from scipy import stats

from dmlplug.errors import DataError
from dmlplug_builtins.oodml.ags import ags, normalized_fids
from dmlplug_builtins.oodml.fewshot_stats import mean_confidence_interval

# Milbich et al. 2021 (ooDML): CUB200 split FIDs of Table S1; Margin R@1 per split of Table S4.
CUB_FIDS = [19.2, 28.5, 52.6, 72.2, 92.5, 120.4, 136.5, 152.0, 173.9]
CUB_MARGIN_R1 = [76.20, 71.79, 65.78, 65.38, 63.30, 61.53, 59.95, 57.67, 58.59]


def test_cub_margin_oracle():
    score = ags(CUB_FIDS, CUB_MARGIN_R1)
    assert score == pytest.approx(63.61, abs=0.005)  # docs/oodml.md
    assert round(score, 1) == 63.6  # paper Table S3


def test_order_of_splits_does_not_matter():
    order = np.random.default_rng(0).permutation(len(CUB_FIDS))
    shuffled = ags(np.array(CUB_FIDS)[order], np.array(CUB_MARGIN_R1)[order])
    assert shuffled == pytest.approx(ags(CUB_FIDS, CUB_MARGIN_R1), rel=1e-12)


def test_linear_curve_integrates_exactly():
    # score = a + b * normalised FID: the trapezoid rule is exact, AGS = a + b / 2 whatever the spacing.
    fids = np.array([3.0, 4.5, 11.0, 20.0, 41.0])
    normalised = (fids - fids.min()) / (fids.max() - fids.min())
    assert ags(fids, 70.0 - 30.0 * normalised) == pytest.approx(55.0, rel=1e-12)


def test_flat_curve_gives_the_score():
    assert ags([10, 50, 30], [42.0, 42.0, 42.0]) == pytest.approx(42.0)


def test_convex_curve_converges_to_the_integral():
    # score = 100 * x^2 on a fine grid: integral 100/3; the trapezoid error is 100 / (6 n^2).
    fids = np.linspace(5.0, 125.0, 201)
    x = (fids - 5.0) / 120.0
    assert ags(fids, 100 * x**2) == pytest.approx(100 / 3 + 100 / (6 * 200**2), rel=1e-9)


def test_normalized_fids_span_unit_interval():
    assert normalized_fids([10.0, 30.0, 20.0]).tolist() == [0.0, 1.0, 0.5]


@pytest.mark.parametrize(
    ("fids", "scores", "message"),
    [([1.0], [2.0], "at least two"), ([1.0, 1.0], [2.0, 3.0], "same FID"),
     ([1.0, 2.0], [2.0], "aligned"), ([1.0, np.nan], [2.0, 3.0], "NaN"), ([1.0, 2.0], [2.0, np.inf], "NaN")],
)
def test_invalid_inputs(fids, scores, message):
    with pytest.raises(DataError, match=message):
        ags(fids, scores)


def test_confidence_interval_known_values():
    # [1..5]: mean 3, sd = sqrt(2.5), sem = sqrt(0.5), t_{0.975, 4} = 2.7764451...
    mean, half = mean_confidence_interval([1, 2, 3, 4, 5])
    assert mean == 3.0
    assert half == pytest.approx(np.sqrt(0.5) * 2.7764451051977987, rel=1e-9)


def test_confidence_interval_matches_scipy_interval():
    values = np.random.default_rng(1).normal(60, 3, size=10)
    mean, half = mean_confidence_interval(values, confidence=0.9)
    low, high = stats.t.interval(0.9, len(values) - 1, loc=values.mean(), scale=stats.sem(values))
    assert (mean - half, mean + half) == pytest.approx((low, high), rel=1e-12)


def test_confidence_interval_edge_cases():
    mean, half = mean_confidence_interval([7.5])
    assert mean == 7.5 and np.isnan(half)
    with pytest.raises(ValueError):
        mean_confidence_interval([])
    with pytest.raises(ValueError):
        mean_confidence_interval([1.0, 2.0], confidence=1.0)
