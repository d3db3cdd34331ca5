"""What the two :class:`~dmlplug.protocols.RerankProblem` implementations share, and re-rankers may use.

An evaluation (:mod:`dmlplug.evaluation.rerank_eval`) and ``dmlplug search``
(:mod:`dmlplug.bundle.rerank_search`) each fill a problem; both hand re-rankers unit vectors and find a gallery's
neighbours among itself with the exact, blocked kNN search (no ``G×G`` matrix is built).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dmlplug.evaluation.knn import exact_knn, resolve_backend


def normalise(vectors: Any) -> np.ndarray:
    """float32 rows scaled to unit length, computed in float64 (a zero row stays zero)."""
    x = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def gallery_knn(gallery: Any, n: int, *, budget_bytes: int) -> np.ndarray:
    """``G×n`` rows: each row's ``n`` nearest other rows by cosine similarity, in the canonical order.

    The exact kNN (:func:`~dmlplug.evaluation.knn.exact_knn`, on the CPU) of the normalised rows among
    themselves, each row left out of its own list; ``-1`` where fewer than ``n`` others exist.
    """
    g = normalise(gallery)
    found, _ = exact_knn(g, g, n, self_pos=np.arange(len(g), dtype=np.int64), backend=resolve_backend("auto", False),
                         budget_bytes=budget_bytes)
    return found
