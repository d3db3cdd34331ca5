"""Fréchet distance: against the scipy sqrtm reference formula, analytic cases and both solution routes."""

import numpy as np
import pytest
from scipy import linalg

from dmlplug.errors import DataError
from dmlplug_builtins.oodml.frechet import frechet_distance, frechet_distance_from_moments, trace_sqrt_product

EPS = 1e-8


def sqrtm_formula(a, b, eps=EPS):
    """The reference ooDML formula (split_helpers.metric_fid), written out with scipy.linalg.sqrtm."""
    mean_a, mean_b = a.mean(0), b.mean(0)
    cov_a, cov_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    offset = eps * np.eye(len(cov_a))
    root = linalg.sqrtm((cov_a + offset) @ (cov_b + offset)).real
    diff = mean_a - mean_b
    return float(diff @ diff + np.trace(cov_a) + np.trace(cov_b) - 2.0 * np.trace(root))


def singular_value_formula(a, b):
    """eps = 0 in point space: Tr((S_a S_b)^1/2) = sum of singular values of A~ B~^T / sqrt((n_a-1)(n_b-1))."""
    centred_a, centred_b = a - a.mean(0), b - b.mean(0)
    root = np.linalg.svd(centred_a @ centred_b.T, compute_uv=False).sum()
    root /= np.sqrt((len(a) - 1) * (len(b) - 1))
    diff = a.mean(0) - b.mean(0)
    traces = (centred_a**2).sum() / (len(a) - 1) + (centred_b**2).sum() / (len(b) - 1)
    return float(diff @ diff + traces - 2.0 * root)


def correlated(rng, n, dim, scale=1.0, shift=0.0):
    mix = rng.standard_normal((dim, dim)) / np.sqrt(dim)
    return scale * rng.standard_normal((n, dim)) @ mix + shift


def class_means_like(rng, n, dim, shift=0.0):
    """Non-negative, sparse-ish vectors like pooled ReLU features averaged over a class."""
    return np.maximum(rng.standard_normal((n, dim)), 0) * rng.uniform(0.2, 1.0, dim) + shift


def relative(x, y):
    return abs(x - y) / abs(y)


def test_full_rank_matches_sqrtm_formula():
    rng = np.random.default_rng(0)
    a, b = correlated(rng, 400, 128), correlated(rng, 350, 128, scale=1.3, shift=0.05)
    assert relative(frechet_distance(a, b), sqrtm_formula(a, b)) < 1e-6


def test_rank_deficient_class_means_match_sqrtm_formula():
    rng = np.random.default_rng(1)
    a, b = class_means_like(rng, 40, 200), class_means_like(rng, 55, 200, shift=0.03)
    assert relative(frechet_distance(a, b), sqrtm_formula(a, b)) < 1e-6


def test_rank_deficient_class_means_at_2048d():
    # The ooDML setting: 98 class means per side in 2048-d. scipy's sqrtm takes tens of seconds here (the
    # benchmark compares against it); the oracle is the independent point-space formula, exact for eps = 0.
    rng = np.random.default_rng(2)
    a, b = class_means_like(rng, 98, 2048), class_means_like(rng, 98, 2048, shift=0.02)
    assert relative(frechet_distance(a, b, eps=0.0), singular_value_formula(a, b)) < 1e-6


def test_both_routes_agree_on_rank_deficient_covariances():
    # Fewer points than dimensions: frechet_distance works in the span of the points, while the moments
    # route factorises the full (eps-regularised, singular) covariances.
    rng = np.random.default_rng(3)
    a, b = class_means_like(rng, 30, 200), class_means_like(rng, 25, 200, shift=0.05)
    from_points = frechet_distance(a, b)
    from_moments = frechet_distance_from_moments(a.mean(0), np.cov(a, rowvar=False),
                                                 b.mean(0), np.cov(b, rowvar=False))
    assert relative(from_points, from_moments) < 1e-9


@pytest.mark.parametrize("n", [20, 400], ids=["span-route", "full-route"])
def test_translation_gives_squared_shift(n):
    # Same covariance: FID = ||shift||^2 exactly when eps = 0 (and 2*dim*eps less with eps).
    rng = np.random.default_rng(4)
    a = correlated(rng, n, 64)
    shift = rng.standard_normal(64)
    expected = float(shift @ shift)
    assert frechet_distance(a, a + shift, eps=0.0) == pytest.approx(expected, rel=1e-8)
    assert frechet_distance(a, a + shift) == pytest.approx(expected - 2 * 64 * EPS, rel=1e-8)


@pytest.mark.parametrize("n", [20, 400], ids=["span-route", "full-route"])
def test_scaled_copy_has_known_distance(n):
    # b = 2a: Sigma_b = 4 Sigma_a, Tr sqrt(Sigma_a Sigma_b) = 2 Tr Sigma_a, so FID = ||mu||^2 + Tr Sigma_a.
    rng = np.random.default_rng(5)
    a = correlated(rng, n, 48, shift=0.3)
    mean = a.mean(0)
    expected = float(mean @ mean + np.trace(np.cov(a, rowvar=False)))
    assert frechet_distance(a, 2 * a, eps=0.0) == pytest.approx(expected, rel=1e-8)


def test_symmetric_and_float32_input_is_computed_in_float64():
    rng = np.random.default_rng(6)
    a, b = class_means_like(rng, 30, 100).astype(np.float32), class_means_like(rng, 30, 100).astype(np.float32)
    forward = frechet_distance(a, b)
    assert forward == pytest.approx(frechet_distance(b, a), rel=1e-10)
    assert forward == pytest.approx(frechet_distance(a.astype(np.float64), b.astype(np.float64)), rel=1e-12)


def test_trace_sqrt_product_with_singular_first_factor():
    # No Cholesky factor exists: the eigendecomposition fallback must give the same trace.
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((10, 30)), rng.standard_normal((40, 30))
    singular, full = x.T @ x, y.T @ y
    expected = np.trace(linalg.sqrtm(singular @ full)).real
    assert trace_sqrt_product(singular, full) == pytest.approx(expected, rel=1e-7)


def test_invalid_inputs():
    rng = np.random.default_rng(8)
    a = rng.standard_normal((10, 5))
    with pytest.raises(ValueError, match="dimensions differ"):
        frechet_distance(a, rng.standard_normal((10, 6)))
    with pytest.raises(DataError, match="at least 2"):
        frechet_distance(a, a[:1])
    broken = a.copy()
    broken[3, 2] = np.nan
    with pytest.raises(DataError, match="NaN"):
        frechet_distance(a, broken)
    with pytest.raises(ValueError, match="eps"):
        frechet_distance(a, a, eps=-1.0)
