"""Exact k-nearest-neighbour search with interchangeable backends and one canonical order.

Every backend (faiss on CPU or GPU, plain torch) computes squared Euclidean distances in float32 with the
``|q|² + |g|² − 2 q·g`` expansion, whose rounding error depends on the BLAS kernel. To make the backends
agree exactly, the result is defined independently of any backend: neighbours are ordered by their float64
distance ``Σ (q_d − g_d)²`` and ties are broken by the smaller gallery position. A backend's answer is
accepted as-is for a query only when consecutive distances in its top-k (and the next one) are further
apart than twice a rigorous float32 error bound, in which case the backend order provably *is* the
canonical order. The remaining queries (near-ties, duplicates) are re-ranked in float64 over a larger
candidate list whose completeness is certified by the same error bound, doubling the list until it is.

With ``relevance`` (query and gallery labels) only near-tied runs that mix relevant and irrelevant items are
re-ranked: swapping two equally relevant neighbours cannot change any relevance-based metric, so the
relevance pattern (:meth:`EvalContext.hits`) still equals the canonical one, at a fraction of the cost.

Everything runs where the data is: for torch tensors on a GPU the search, the norms and the float64 distances
stay on the device; only the small ``Q×k`` candidate lists come to the host.

Self-matches are removed by index (``self_pos``), never by assuming the first neighbour is the query.

This module is the public entry (:func:`exact_knn`, :func:`resolve_backend`, :data:`BACKENDS`); the backend
choice lives in :mod:`~dmlplug.evaluation.knn_backend`, the raw backend calls (faiss, chunked torch) in
:mod:`~dmlplug.evaluation.knn_search`, the half-product first search of leave-one-out on the CPU in
:mod:`~dmlplug.evaluation.knn_symmetric`, and the certification and float64 re-ranking in
:mod:`~dmlplug.evaluation.knn_rerank`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# BACKENDS and resolve_backend are re-exported: this module is where callers (and plugins) find the search.
from dmlplug.evaluation.knn_backend import BACKENDS, resolve_backend
from dmlplug.evaluation.knn_rerank import SearchJob, SearchStats, search_chunk
from dmlplug.evaluation.knn_search import Searcher, as_numpy32, row_norms
from dmlplug.evaluation.knn_symmetric import BLOCK_ROWS, MIN_DIM, symmetric_knn

__all__ = ["BACKENDS", "SearchStats", "default_budget_bytes", "exact_knn", "resolve_backend"]

#: Error bound of one float32 distance ``|q|²+|g|²−2q·g``: each of the three D-term sums is off by at most
#: ``γ_D ≈ D·u`` times its absolute terms (any summation order, FMA or not; Higham, *Accuracy and Stability of
#: Numerical Algorithms*, §3.1), and the two additions and the norm casts add a few ``u`` more, so
#: ``(D + 4)·u·(|q| + |g|)²`` bounds it; the factor 1.1 covers the ``1/(1 − D·u)`` of ``γ_D``.
_BOUND_FACTOR = 1.1

#: Unit round-off used in the error bound: float32 for faiss-cpu and torch (TF32 is switched off while
#: searching), the 10-bit mantissa of TF32 for faiss-gpu, which may use tensor cores.
_ROUNDOFF = {"faiss-cpu": 2.0**-24, "torch": 2.0**-24, "faiss-gpu": 2.0**-11}

#: Queries per backend call (bounds the size of the result arrays; the budget may lower it).
_MAX_QUERY_CHUNK = 16384


def exact_knn(
    queries: Any,
    gallery: Any,
    k: int,
    *,
    self_pos: np.ndarray,
    backend: str,
    budget_bytes: int,
    depth: np.ndarray | None = None,
    slack: int = 8,
    relevance: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, SearchStats]:
    """The k nearest gallery positions of every query, in the canonical order up to a per-query depth.

    Args:
        queries: ``Q×D`` float32 array or tensor.
        gallery: ``G×D`` float32 array or tensor (on the same device as ``queries``).
        k: Number of neighbours returned (values beyond what a query can have are padded with ``-1``).
        self_pos: ``Q`` int64: gallery position of the query itself, or ``-1`` when it is not in the gallery.
        backend: A resolved backend name (``faiss-cpu``, ``faiss-gpu``, ``torch``).
        budget_bytes: Working-memory budget for distance blocks and re-ranking.
        depth: ``Q`` ints ≤ k: the first ``depth[q]`` neighbours of query q are certified canonical (set
            and order); later columns follow the backend's order. Default: ``k`` for every query. Metrics
            that look at fewer positions for some queries (MAP@R needs R_q) save work this way.
        slack: Extra candidates fetched beyond k + 2, so most near-tie queries are re-ranked in place.
        relevance: Optional ``(query labels Q, gallery labels G)``: then the first ``depth[q]`` columns are
            canonical up to swaps of near-tied neighbours that are both relevant or both irrelevant, so
            their relevance pattern is the canonical one while far fewer pairs are re-ranked.

    Returns:
        ``Q×k`` int64 gallery positions (``-1`` where fewer than ``k`` neighbours exist) and statistics.
    """
    num_q, dim = int(queries.shape[0]), int(queries.shape[1])
    num_g = int(gallery.shape[0])
    result = np.full((num_q, k), -1, dtype=np.int64)
    stats = SearchStats(queries=num_q)
    if num_q == 0 or k == 0 or num_g == 0:
        return result, stats
    depth = np.full(num_q, k, dtype=np.int64) if depth is None else np.clip(np.asarray(depth), 1, k)
    searcher = Searcher(backend, gallery)
    q_norm = row_norms(queries)
    # Leave-one-out searches the embeddings in themselves: their norms are computed once.
    g_norm_max = float((q_norm if gallery is queries else row_norms(gallery)).max())
    eps = _BOUND_FACTOR * (dim + 4) * _ROUNDOFF[backend] * (q_norm + g_norm_max) ** 2 + 1e-30
    # torch materialises a rows × G block (plus topk's copy); faiss works in small internal blocks.
    block_rows = max(1, budget_bytes // max(1, 12 * num_g)) if backend == "torch" else _MAX_QUERY_CHUNK
    job = SearchJob(searcher, queries, gallery, k, depth, self_pos, eps, result, stats, block_rows,
                    budget_bytes, relevance)
    threads = 1
    if backend == "faiss-cpu":
        import faiss

        # The same threads as faiss's own search: the re-ranking below shares its rows among them too.
        threads = faiss.omp_get_max_threads()
        width = min(k + 2 + slack, num_g)
        if gallery is queries and dim >= MIN_DIM and num_q > BLOCK_ROWS and num_q * width * 12 <= budget_bytes // 2:
            # Leave-one-out: the first candidate lists from half the matrix product (knn_symmetric), when the
            # heaps for all the queries fit in the budget (else faiss, chunk by chunk).
            job.first = symmetric_knn(as_numpy32(queries), width, threads=threads, budget_bytes=budget_bytes // 2)
    for start in range(0, num_q, _MAX_QUERY_CHUNK):
        search_chunk(job, np.arange(start, min(start + _MAX_QUERY_CHUNK, num_q)), slack, threads)
    return result, stats


def default_budget_bytes(memory_budget_mb: float | None) -> int:
    """The working-memory budget in bytes (256 MiB when the user sets none)."""
    mb = 256.0 if memory_budget_mb is None else float(memory_budget_mb)
    return int(math.floor(mb * 1024 * 1024))
