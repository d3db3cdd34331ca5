"""k-reciprocal re-ranking (Zhong et al. 2017) of each query's shortlist, in bounded memory (docs/reranking.md).

:func:`k_reciprocal` re-ranks each query's shortlist of K candidates: the k-reciprocal sets, the local query
expansion and the Jaccard distance are computed among the query and its K candidates, in batches of queries whose
``(K+1)²`` matrices fit the working-memory budget. The maths runs in float64, its batched products in torch
(imported when it runs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dmlplug.evaluation.rerank_problem import normalise
from dmlplug.protocols import RerankProblem


class KReciprocal:
    """``krnn``: the first ``shortlist`` neighbours of each query re-ordered; beyond them, the search's order."""

    def __init__(self, k1: int, k2: int, lam: float, shortlist: int):
        self.k1, self.k2, self.lam, self.shortlist = k1, k2, lam, shortlist

    def rerank(self, problem: RerankProblem, k: int) -> np.ndarray:
        """``k`` neighbours of each query, the first ``shortlist`` (at most the gallery) re-ranked."""
        shortlist = min(self.shortlist, len(problem.gallery))
        depth = None if problem.depth is None else np.maximum(problem.depth, shortlist)
        found = np.array(problem.search(problem.queries, max(k, shortlist), depth), dtype=np.int64)
        found[:, :shortlist] = k_reciprocal(problem.queries, problem.gallery, found[:, :shortlist], k1=self.k1,
                                            k2=self.k2, lam=self.lam, budget_bytes=problem.budget_bytes)
        return found[:, :k]


def k_reciprocal(queries: Any, gallery: Any, shortlist: np.ndarray, *, k1: int = 20, k2: int = 6,
                 lam: float = 0.3, budget_bytes: int = 256 << 20) -> np.ndarray:
    """k-reciprocal re-ranking of each query's shortlist (Zhong et al. 2017, on the query and its K candidates).

    For a query q with candidates ``c_1..c_K`` the point set is ``P = {q, c_1, ..., c_K}``; d is the squared
    Euclidean distance of the normalised vectors, each row divided by its largest value in P. Within P:
    ``R(p, k)`` = the k-reciprocal neighbours of p (``p' ∈ N(p, k+1)`` and ``p ∈ N(p', k+1)``);
    ``R*(p)`` = ``R(p, k1)`` ∪ every ``R(c, round(k1/2))``, ``c ∈ R(p, k1)``, that shares more than 2/3 of
    its members with ``R(p, k1)``; ``V_p = exp(−d(p, ·))`` on ``R*(p)``, 0 elsewhere, summing to 1; with
    ``k2 > 1`` each ``V_p`` is replaced by the mean of ``V`` over p's ``k2`` nearest points (p first);
    Jaccard distance ``d_J(q, c) = 1 − Σ min(V_q, V_c) / Σ max(V_q, V_c)``; the candidates are ordered by
    ``(1 − λ)·d_J + λ·d`` (ties keep the shortlist order).

    Args:
        queries: ``Q×D`` vectors (normalised here).
        gallery: ``G×D`` vectors (normalised here).
        shortlist: ``Q×K`` gallery rows, nearest first; ``-1`` entries (fewer candidates) stay at the end.
        k1: Size of the k-reciprocal neighbourhoods.
        k2: Neighbours of the local query expansion (1: none).
        lam: Weight λ of the original distance.
        budget_bytes: Working memory: the queries of one batch hold a few ``(K+1)×(K+1)`` float64 arrays each.

    Returns:
        ``Q×K`` gallery rows in the re-ranked order (``-1`` where the shortlist had none).
    """
    q = normalise(queries)
    g = normalise(gallery)
    shortlist = np.asarray(shortlist, dtype=np.int64)
    out = shortlist.copy()
    counts = (shortlist >= 0).sum(axis=1)
    for count in np.unique(counts):  # rows with the same number of candidates are batched together
        if count < 2:
            continue  # nothing to reorder
        rows = np.flatnonzero(counts == count)
        size = int(count) + 1
        batch = max(1, budget_bytes // (8 * size * (12 * size + g.shape[1])))  # S×D points, ~12 S×S arrays
        for start in range(0, len(rows), batch):
            r = rows[start:start + batch]
            cand = _valid(shortlist[r], int(count))
            final = _final_distances(q[r], g, cand, k1, k2, lam)
            order = np.argsort(final, axis=1, kind="stable")
            out[r, :count] = np.take_along_axis(cand, order, axis=1)
    return out


def _valid(rows: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` valid entries of each row, in their order (``-1`` entries are dropped)."""
    keep = rows >= 0
    return rows[keep].reshape(len(rows), count)


def _final_distances(q: np.ndarray, g: np.ndarray, cand: np.ndarray, k1: int, k2: int, lam: float) -> np.ndarray:
    """``B×K`` final distances of the candidates of a batch of B queries (see :func:`k_reciprocal`).

    Batched float64 matrix products in torch: numpy's stacked matmul does not use BLAS and is ~10× slower.
    """
    import torch

    points = torch.from_numpy(np.concatenate([q[:, None, :], g[cand]], axis=1)).double()  # B×S×D, query first
    size = points.shape[1]
    sq = (points * points).sum(dim=2)
    dist = (sq[:, :, None] + sq[:, None, :] - 2.0 * torch.bmm(points, points.transpose(1, 2))).clamp_min(0.0)
    idx = torch.arange(size)
    dist[:, idx, idx] = 0.0
    top = dist.amax(dim=2, keepdim=True)
    dist = dist / torch.where(top > 0, top, torch.ones_like(top))
    rank = torch.argsort(dist, dim=2, stable=True)
    recip = _reciprocal(rank, k1 + 1)
    half = _reciprocal(rank, int(np.around(k1 / 2.0)) + 1)
    recip_f, half_f = recip.double(), half.double()
    overlap = torch.bmm(recip_f, half_f.transpose(1, 2))  # [b, p, c] = |R(p, k1) ∩ R(c, k1/2)|
    half_size = half_f.sum(dim=2)[:, None, :]
    grows = recip & (3.0 * overlap > 2.0 * half_size)  # c ∈ R(p, k1) whose R(c, k1/2) overlaps by more than 2/3
    expanded = recip | (torch.bmm(grows.double(), half_f) > 0)
    v = torch.where(expanded, torch.exp(-dist), torch.zeros_like(dist))
    v = v / v.sum(dim=2, keepdim=True)
    if k2 > 1:  # local query expansion: the mean of V over each point's k2 nearest, as a product with a 0/1 matrix
        width = min(k2, size)
        nearest = torch.zeros_like(dist).scatter_(2, rank[:, :, :width], 1.0)
        v = torch.bmm(nearest, v) / width
    shared = torch.minimum(v[:, :1, :], v[:, 1:, :]).sum(dim=2)  # B×K: Σ min(V_q, V_c)
    jaccard = 1.0 - shared / (2.0 - shared)  # Σ max = Σ V_q + Σ V_c − Σ min = 2 − Σ min
    return ((1.0 - lam) * jaccard + lam * dist[:, 0, 1:]).numpy()


def _reciprocal(rank: Any, width: int) -> Any:
    """``B×S×S`` booleans: ``[b, p, c]`` = c is among p's ``width`` nearest and p among c's."""
    import torch

    near = torch.zeros(rank.shape, dtype=torch.bool).scatter_(2, rank[:, :, :width], True)
    return near & near.transpose(1, 2)
