"""Fréchet distance between two feature sets, exact and without ``scipy.linalg.sqrtm``.

The distance between Gaussians fitted to two sets of feature vectors is

    FID = ||mu_a - mu_b||² + Tr(S_a) + Tr(S_b) - 2 Tr(((S_a + eps I)(S_b + eps I))^{1/2})

with ``np.cov``-style (``n - 1``) covariances. This is exactly the reference ooDML formula
(``split_helpers.metric_fid``): ``eps`` regularises only the matrix square root, the two plain traces stay
unregularised, so the published split FIDs are reproduced. A consequence is that the distance of a set to
itself is ``-2 * dim * eps`` rather than 0.

The trace of the square root never needs the square root itself: ``(S_a S_b)`` is similar to the symmetric
matrix ``Lᵀ S_b L`` (``L`` a Cholesky factor of ``S_a``), so the trace is the sum of the square roots of its
eigenvalues, and a symmetric eigenvalue solver without eigenvectors is several times cheaper than the
Schur decomposition behind ``sqrtm``. When there are fewer points than dimensions (ooDML measures sets of
~100 class means in 2048-d) the covariances live in the span of the centred points and the problem is
solved there, in ``(n_a + n_b)``-space, still exactly (see :func:`frechet_distance`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from dmlplug.errors import DataError

#: Diagonal offset of the reference implementation.
DEFAULT_EPS = 1e-8


def frechet_distance(features_a: np.ndarray, features_b: np.ndarray, *, eps: float = DEFAULT_EPS) -> float:
    """Fréchet distance between Gaussians fitted to two sets of feature vectors.

    Computed in float64 whatever the input dtype (float32 gives errors of tens of percent when the distance
    is small). When ``n_a + n_b < dim`` the work happens in the span of the centred points: with ``Q`` an
    orthonormal basis of that span (``m`` columns), ``S + eps I = Q (QᵀSQ + eps I) Qᵀ + eps (I - QQᵀ)``, so the
    product of the two regularised covariances is block diagonal and the trace of its square root is the
    ``m×m`` problem plus ``(dim - m) * eps``. This is exact, not an approximation.

    Args:
        features_a: ``n_a×dim`` array, one feature vector per row (``n_a >= 2``).
        features_b: ``n_b×dim`` array with the same ``dim`` (``n_b >= 2``).
        eps: Offset added to both covariance diagonals inside the square root (reference: ``1e-8``).

    Returns:
        The distance as a Python float.

    Raises:
        ValueError: The arrays are not 2-D, their dimensions differ, or ``eps`` is negative.
        DataError: A set has fewer than two vectors or contains NaN/inf.
    """
    a = _feature_matrix(features_a, "features_a")
    b = _feature_matrix(features_b, "features_b")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"feature dimensions differ: {a.shape[1]} and {b.shape[1]}")
    _check_eps(eps)
    (n_a, dim), n_b = a.shape, b.shape[0]
    mean_a, mean_b = a.mean(axis=0), b.mean(axis=0)
    centred_a, centred_b = a - mean_a, b - mean_b
    diff = mean_a - mean_b
    if n_a + n_b < dim:
        trace_a = float(np.einsum("ij,ij->", centred_a, centred_a)) / (n_a - 1)
        trace_b = float(np.einsum("ij,ij->", centred_b, centred_b)) / (n_b - 1)
        root = _trace_sqrt_in_span(centred_a, centred_b, eps)
        return float(diff @ diff) + trace_a + trace_b - 2.0 * root
    cov_a = (centred_a.T @ centred_a) / (n_a - 1)
    cov_b = (centred_b.T @ centred_b) / (n_b - 1)
    return frechet_distance_from_moments(mean_a, cov_a, mean_b, cov_b, eps=eps)


def frechet_distance_from_moments(
    mean_a: np.ndarray, cov_a: np.ndarray, mean_b: np.ndarray, cov_b: np.ndarray, *, eps: float = DEFAULT_EPS
) -> float:
    """Fréchet distance from precomputed means and covariances (``dim``-space route).

    Useful when the moments are accumulated in streaming fashion over many images.

    Args:
        mean_a: Mean vector of the first set (``dim``).
        cov_a: Covariance of the first set (``dim×dim``, symmetric positive semi-definite).
        mean_b: Mean vector of the second set.
        cov_b: Covariance of the second set.
        eps: Offset added to both covariance diagonals inside the square root.

    Returns:
        The distance as a Python float.

    Raises:
        ValueError: Shapes disagree or ``eps`` is negative.
    """
    mean_a, mean_b = np.asarray(mean_a, dtype=np.float64), np.asarray(mean_b, dtype=np.float64)
    cov_a, cov_b = np.asarray(cov_a, dtype=np.float64), np.asarray(cov_b, dtype=np.float64)
    dim = mean_a.shape[0]
    if mean_a.shape != (dim,) or mean_b.shape != (dim,) or cov_a.shape != (dim, dim) or cov_b.shape != (dim, dim):
        raise ValueError(
            f"shapes disagree: means {mean_a.shape} and {mean_b.shape}, covariances {cov_a.shape} and {cov_b.shape}"
        )
    _check_eps(eps)
    diff = mean_a - mean_b
    offset = eps * np.eye(dim)
    root = trace_sqrt_product(cov_a + offset, cov_b + offset)
    return float(diff @ diff) + float(np.trace(cov_a)) + float(np.trace(cov_b)) - 2.0 * root


def trace_sqrt_product(sym_a: np.ndarray, sym_b: np.ndarray) -> float:
    """``Tr((A B)^{1/2})`` for symmetric positive semi-definite ``A`` and ``B``.

    ``A B`` has the same eigenvalues as ``Lᵀ B L`` for ``A = L Lᵀ``; they are real and non-negative, so the
    trace of the principal square root is the sum of their square roots. When ``A`` is singular (no
    Cholesky factor) its symmetric square root from an eigendecomposition takes the place of ``L``.

    Args:
        sym_a: Symmetric PSD matrix (float64, ``k×k``).
        sym_b: Symmetric PSD matrix of the same shape.

    Returns:
        The trace as a Python float.
    """
    try:
        factor = np.linalg.cholesky(sym_a)
    except np.linalg.LinAlgError:
        values, vectors = np.linalg.eigh(sym_a)
        factor = (vectors * np.sqrt(np.clip(values, 0.0, None))) @ vectors.T
    # eigvalsh reads one triangle only, so rounding asymmetry of the product does not matter.
    eigenvalues = np.linalg.eigvalsh(factor.T @ sym_b @ factor)
    # Tiny negative eigenvalues are rounding noise of a PSD matrix.
    return float(np.sqrt(np.clip(eigenvalues, 0.0, None)).sum())


def _trace_sqrt_in_span(centred_a: np.ndarray, centred_b: np.ndarray, eps: float) -> float:
    """``Tr(((S_a + eps I)(S_b + eps I))^{1/2})`` solved in the span of the centred points."""
    n_a, dim = centred_a.shape
    n_b = centred_b.shape[0]
    stacked = np.concatenate([centred_a, centred_b], axis=0)  # m×dim, m = n_a + n_b < dim
    with _single_blas_thread():
        # stackedᵀ = Q R with orthonormal Q (dim×m), so centred_a @ Q = R[:, :n_a]ᵀ: Q is never formed.
        # numpy's stub types every mode as QRResult; mode "r" returns R alone.
        r: np.ndarray = np.linalg.qr(stacked.T, mode="r")  # type: ignore[assignment]
        span = r.shape[0]
        coords_a, coords_b = r[:, :n_a], r[:, n_a:]
        offset = eps * np.eye(span)
        small_a = (coords_a @ coords_a.T) / (n_a - 1) + offset
        small_b = (coords_b @ coords_b.T) / (n_b - 1) + offset
        root = trace_sqrt_product(small_a, small_b)
    # Outside the span both regularised covariances are eps*I: their product's square root adds eps per axis.
    return root + (dim - span) * eps


@contextlib.contextmanager
def _single_blas_thread() -> Iterator[None]:
    """Run small LAPACK work (the span route, ~2048×200 and 200×200) on one BLAS thread.

    Threads gain nothing at these sizes, and on a machine whose cores are busy OpenBLAS's spinning threads
    make the QR factorisation ~100× slower (seconds instead of ~10 ms). The limit is process-wide while it
    lasts, which is why it wraps only this short computation.
    """
    global _BLAS_CONTROLLER
    try:
        if _BLAS_CONTROLLER is None:
            from threadpoolctl import ThreadpoolController

            _BLAS_CONTROLLER = ThreadpoolController()
        limiter = _BLAS_CONTROLLER.limit(limits=1, user_api="blas")
    except ImportError:  # threadpoolctl comes with scikit-learn; without it, just run threaded
        yield
        return
    with limiter:
        yield


_BLAS_CONTROLLER: Any = None


def _feature_matrix(features: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(features, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (points × dimensions), got shape {array.shape}")
    if array.shape[0] < 2:
        raise DataError(
            f"{name} has {array.shape[0]} feature vector(s); a covariance needs at least 2",
            fix="use sets with at least two points (two classes when measuring class means)",
        )
    if not np.isfinite(array).all():
        raise DataError(f"{name} contains NaN or infinite values",
                        fix="check the feature extractor's output (weights, input normalisation)")
    return array


def _check_eps(eps: float) -> None:
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")
