"""Structure metrics of an embedding space (docs/methods/revisiting.md), computed on the query set.

* ``rho@m`` spectral decay: KL(uniform ‖ normalised singular values) of the (not centred) N×D matrix,
  with the m−1 largest singular values dropped (the Revisiting paper's ρ is ``rho@2``).
* ``pi_intra``: mean over classes (with ≥ 2 members) of the mean cosine distance between members;
  ``pi_inter``: mean cosine distance between the L2-normalised class means; ``pi_ratio`` their ratio.
* ``uniformity_g2``: mean of ``exp(−2‖u−v‖²)`` over pairs of L2-normalised embeddings (all pairs up to
  ``max_pairs``, otherwise that many seeded random pairs); ``log`` reports the log of the mean.
* ``class_concentration_var``: variance over classes of ``mean ‖x − μ_c‖ / pi_inter``.

Cosine quantities use L2-normalised embeddings; single-member classes are left out of π_intra and the
class concentration (the reference code's NaN handling for them is broken, see docs/methods/revisiting.md).
"""

from __future__ import annotations

import numpy as np

from dmlplug.evaluation import EvalContext


def spectral_decay(singular_values: np.ndarray, m: int = 1) -> float:
    """KL divergence of the uniform distribution from the normalised singular values ``s[m-1:]``."""
    s = np.sort(np.asarray(singular_values, dtype=np.float64))[::-1][m - 1:]
    n = len(s)
    if n == 0 or s.sum() <= 0:
        return float("nan")
    s_hat = np.maximum(s / s.sum(), 1e-300)  # an exactly zero singular value would give +inf
    return float(np.sum((1.0 / n) * np.log((1.0 / n) / s_hat)))


def singular_values(x: np.ndarray, block_rows: int = 65536) -> np.ndarray:
    """Singular values (descending, min(N, D) of them) from the float64 Gram matrix, in row blocks."""
    gram = np.zeros((x.shape[1], x.shape[1]), dtype=np.float64)
    for start in range(0, len(x), block_rows):
        block = x[start:start + block_rows].astype(np.float64)
        gram += block.T @ block
    eig = np.clip(np.linalg.eigvalsh(gram), 0.0, None)
    return np.sqrt(eig[::-1][: min(x.shape)])


def _normalise(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _class_groups(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    classes, inverse = np.unique(labels, return_inverse=True)
    return inverse, np.bincount(inverse, minlength=len(classes))


def mean_cosine_distance(sum_vector: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Mean cosine distance over ordered pairs i≠j of n unit vectors, from their sum: 1 − (‖Σ‖² − n)/(n² − n)."""
    sq = np.einsum("...i,...i->...", sum_vector, sum_vector)
    n = count.astype(np.float64)
    return 1.0 - (sq - n) / (n * n - n)


def density_metrics(x: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """``pi_intra``, ``pi_inter``, ``pi_ratio`` and ``class_concentration_var``."""
    u = _normalise(x)
    inverse, counts = _class_groups(labels)
    sums = np.zeros((len(counts), u.shape[1]))
    np.add.at(sums, inverse, u)
    multi = counts >= 2
    pi_intra = float(mean_cosine_distance(sums[multi], counts[multi]).mean()) if multi.any() else float("nan")
    centres = sums / counts[:, None]
    centres_unit = _normalise(centres)
    if len(counts) >= 2:
        pi_inter = float(mean_cosine_distance(centres_unit.sum(0), np.array(len(counts))))
    else:
        pi_inter = float("nan")
    ratio = pi_intra / max(pi_inter, 1e-8) if np.isfinite(pi_inter) else float("nan")
    spread = np.linalg.norm(u - centres[inverse], axis=1)
    mean_spread = np.bincount(inverse, weights=spread, minlength=len(counts)) / counts
    if multi.any() and np.isfinite(pi_inter) and pi_inter > 0:
        concentration_var = float(np.var(mean_spread[multi] / pi_inter))
    else:
        concentration_var = float("nan")
    return {"pi_intra": pi_intra, "pi_inter": pi_inter, "pi_ratio": float(ratio),
            "class_concentration_var": concentration_var}


def uniformity_g2(x: np.ndarray, *, t: float = 2.0, max_pairs: int = 20_000_000, seed: int = 0,
                  log: bool = False, block_rows: int = 1024) -> float:
    """Mean Gaussian potential ``exp(−t‖u−v‖²)`` over pairs u≠v of L2-normalised rows."""
    u = _normalise(x)
    n = len(u)
    if n < 2:
        return float("nan")
    if n * (n - 1) // 2 <= max_pairs:
        total = 0.0
        for start in range(0, n, block_rows):
            block = u[start:start + block_rows]
            d2 = np.maximum(2.0 - 2.0 * block @ u.T, 0.0)
            total += float(np.exp(-t * d2).sum())
        total -= n  # the n self-pairs contribute exp(0) = 1 each
        value = total / (n * (n - 1))
    else:
        rng = np.random.default_rng(seed)
        i = rng.integers(0, n, max_pairs)
        j = (i + rng.integers(1, n, max_pairs)) % n
        d2 = np.sum((u[i] - u[j]) ** 2, axis=1)
        value = float(np.exp(-t * d2).mean())
    return float(np.log(value)) if log else float(value)


class StructureEvaluator:
    """Spectral decay, density, uniformity and class-concentration metrics.

    Args:
        rho_m: Which ``rho@m`` values to report.
        uniformity_t: Kernel parameter t of the uniformity (2 gives G₂).
        uniformity_log: Report the log of the mean kernel (Wang & Isola) instead of the mean.
        max_pairs: Pair limit for the uniformity before sampling.
    """

    #: The evaluator's name (metric or table name), set by the factory that builds it.
    name: str

    def __init__(self, rho_m: list[int], uniformity_t: float = 2.0, uniformity_log: bool = False,
                 max_pairs: int = 20_000_000):
        self.rho_m = rho_m
        self.uniformity_t = uniformity_t
        self.uniformity_log = uniformity_log
        self.max_pairs = max_pairs

    def evaluate(self, eval_context: EvalContext) -> dict[str, float]:
        """All structure metrics of the query set."""
        x = eval_context.numpy_embeddings(eval_context.query_index)
        labels = eval_context.query_labels
        s = singular_values(x)
        out = {f"rho@{m}": spectral_decay(s, m) for m in self.rho_m}
        out.update(density_metrics(x, labels))
        out["uniformity_g2"] = uniformity_g2(x, t=self.uniformity_t, max_pairs=self.max_pairs,
                                             seed=eval_context.seed, log=self.uniformity_log)
        return out
