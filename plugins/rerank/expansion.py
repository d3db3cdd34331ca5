"""αQE and DBA: vectors replaced by α-weighted sums of their neighbours, in bounded memory (docs/reranking.md).

- :func:`expand_queries` (αQE, Radenović et al. 2018) needs each query's top-n gallery neighbours;
- :func:`augment_gallery` (DBA) needs each gallery item's top-n other gallery items, which the
  :class:`~dmlplug.protocols.RerankProblem` finds (a blocked exact kNN: no ``G×G`` matrix is built).

The sums are computed in row chunks of the working-memory budget, in float64; the vectors returned are float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dmlplug.evaluation.rerank_problem import normalise
from dmlplug.protocols import RerankProblem

#: Bytes of working memory one float64 gallery row of a chunk may take (rows per chunk = budget / this).
_ROW_COST = 8


def weighted_sum(centres: np.ndarray, gallery: np.ndarray, neighbours: np.ndarray, alpha: float,
                 budget_bytes: int = 256 << 20) -> np.ndarray:
    """``normalise(c + Σ_i max(c·g_i, 0)^alpha · g_i)`` over each row's valid neighbours ``g_i`` (float32).

    The centre's own weight is ``(c·c)^alpha = 1`` for a unit vector. Similarities below zero get weight 0
    (a negative base has no real power for non-integer alpha); ``alpha = 0`` weights every neighbour 1.

    Args:
        centres: ``M×D`` unit vectors (queries for αQE, gallery items for DBA).
        gallery: ``G×D`` unit vectors.
        neighbours: ``M×n`` gallery rows, ``-1`` for a missing neighbour.
        alpha: The exponent α.
        budget_bytes: Working memory for the gathered ``chunk × n × D`` neighbour vectors.
    """
    m, dim = centres.shape
    n = neighbours.shape[1] if neighbours.ndim == 2 else 0
    out = np.empty((m, dim), dtype=np.float32)
    rows = max(1, budget_bytes // max(1, 3 * _ROW_COST * max(n, 1) * dim))
    for start in range(0, m, rows):
        c = centres[start:start + rows].astype(np.float64)
        nb = neighbours[start:start + rows]
        valid = nb >= 0
        g = gallery[np.maximum(nb, 0)].astype(np.float64)  # chunk × n × D
        sims = np.einsum("md,mnd->mn", c, g)
        weights = np.where(valid, np.maximum(sims, 0.0) ** alpha, 0.0)
        out[start:start + rows] = normalise(c + np.einsum("mn,mnd->md", weights, g))
    return out


def expand_queries(queries: Any, gallery: Any, neighbours: np.ndarray, *, alpha: float,
                   budget_bytes: int = 256 << 20) -> np.ndarray:
    """αQE: each query replaced by the normalised ``q + Σ_{i≤n} (q·g_i)^α g_i`` over its top-n neighbours.

    Args:
        queries: ``Q×D`` vectors (normalised here).
        gallery: ``G×D`` vectors (normalised here).
        neighbours: ``Q×n`` gallery rows of each query's n nearest neighbours (``-1``: none).
        alpha: The exponent α (Radenović et al. use 3).
        budget_bytes: Working-memory budget.

    Returns:
        ``Q×D`` float32 expanded queries, unit length.
    """
    return weighted_sum(normalise(queries), normalise(gallery), np.asarray(neighbours), alpha, budget_bytes)


def augment_gallery(gallery: Any, neighbours: np.ndarray, *, alpha: float, budget_bytes: int = 256 << 20) -> np.ndarray:
    """DBA: each gallery item replaced by the normalised α-weighted sum of itself and its nearest other items.

    Args:
        gallery: ``G×D`` vectors (normalised here).
        neighbours: ``G×n`` rows of each item's n nearest other items (its own row excluded; ``-1``: none,
            e.g. fewer than n others, or an item an index removed, whose zero row stays zero).
        alpha: The exponent α of the weights.
        budget_bytes: Working-memory budget.

    Returns:
        ``G×D`` float32 augmented gallery, unit length.
    """
    g = normalise(gallery)
    return weighted_sum(g, g, np.asarray(neighbours), alpha, budget_bytes)


class QueryExpansion:
    """``aqe``: the search again, with each query expanded by its ``n`` nearest gallery items."""

    def __init__(self, n: int, alpha: float):
        self.n, self.alpha = n, alpha

    def rerank(self, problem: RerankProblem, k: int) -> np.ndarray:
        """The neighbours of the expanded queries (depth-certified as the caller asks)."""
        neighbours = problem.search(problem.queries, self.n)
        expanded = expand_queries(problem.queries, problem.gallery, neighbours, alpha=self.alpha,
                                  budget_bytes=problem.budget_bytes)
        return problem.search(expanded, k, problem.depth)


class DatabaseAugmentation:
    """``dba``: the queries searched in the gallery whose items are expanded by their ``n`` nearest others."""

    def __init__(self, n: int, alpha: float):
        self.n, self.alpha = n, alpha

    def rerank(self, problem: RerankProblem, k: int) -> np.ndarray:
        """The neighbours in the augmented gallery (an exact search: the index cannot search new vectors)."""
        augmented = augment_gallery(problem.gallery, problem.gallery_neighbours(self.n), alpha=self.alpha,
                                    budget_bytes=problem.budget_bytes)
        return problem.search_in(augmented, problem.queries, k, problem.depth)
