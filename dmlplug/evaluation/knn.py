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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dmlplug.errors import RunError, did_you_mean
from dmlplug.knn_backends import KNN_BACKENDS

#: Backend names accepted by :class:`~dmlplug.evaluation.EvalContext`: the one list the recipe schema checks
#: ``[evaluation] backend`` against too (:data:`dmlplug.knn_backends.KNN_BACKENDS`).
BACKENDS = KNN_BACKENDS

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


def faiss_available() -> bool:
    """Whether faiss can be imported."""
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def faiss_gpu_available() -> bool:
    """Whether faiss was built with GPU support and sees a GPU."""
    try:
        import faiss
    except ImportError:
        return False
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def resolve_backend(requested: str, on_cuda: bool) -> str:
    """Pick the kNN backend.

    ``auto`` prefers faiss-gpu when the data is on a GPU and faiss-gpu sees one, then torch for data on a
    GPU, then faiss-cpu, then torch.

    Raises:
        RunError: The backend name is unknown or the backend is not installed.
    """
    if requested not in BACKENDS:
        raise RunError(
            f"unknown kNN backend {requested!r}{did_you_mean(str(requested), BACKENDS)}",
            where="evaluation backend",
            fix="use one of: " + ", ".join(BACKENDS),
        )
    if requested == "auto":
        if on_cuda:
            return "faiss-gpu" if faiss_gpu_available() else "torch"
        return "faiss-cpu" if faiss_available() else "torch"
    if requested == "faiss-cpu" and not faiss_available():
        raise RunError("the faiss-cpu kNN backend needs faiss", where="evaluation backend",
                       fix="pip install faiss-cpu, or use backend='torch'")
    if requested == "faiss-gpu" and not faiss_gpu_available():
        raise RunError("the faiss-gpu kNN backend needs faiss with GPU support and a visible GPU",
                       where="evaluation backend",
                       fix="pip install faiss-gpu-cu12 (dmlplug[gpu]), or use backend='torch'")
    return requested


@dataclass
class SearchStats:
    """Counts describing how a search went (useful to tune ``slack`` and to spot degenerate data).

    Attributes:
        queries: Number of queries searched.
        reranked: Queries whose backend list had near-ties, re-ordered by exact float64 distances.
        widened: Re-ranked queries whose first candidate list was too short (searched again, wider).
    """

    queries: int = 0
    reranked: int = 0
    widened: int = 0


def _to_torch(x: Any) -> Any:
    import torch

    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x))


class _Searcher:
    """Runs one backend on raw float32 data and returns backend-ordered (sq. distances, positions)."""

    def __init__(self, backend: str, gallery: Any):
        self.backend = backend
        self.gallery = gallery
        self._gpu_res = None
        if backend == "torch":

            g = _to_torch(gallery)
            self.gallery_t = g
            self.gallery_sq = _sq_norms(g).to(g.dtype)
        elif backend == "faiss-gpu":
            import faiss

            self._gpu_res = faiss.StandardGpuResources()

    def search(self, queries: Any, k: int, chunk_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Backend k-NN of ``queries`` (sorted by backend distance) as numpy (float32, int64)."""
        if self.backend == "faiss-cpu":
            import faiss

            q = _as_numpy32(queries)
            d, i = faiss.knn(q, _as_numpy32(self.gallery), k)
            return d, i.astype(np.int64, copy=False)
        if self.backend == "faiss-gpu":
            import faiss

            if isinstance(self.gallery, np.ndarray):
                d, i = faiss.knn_gpu(self._gpu_res, _as_numpy32(queries), self.gallery, k)
                return d, i.astype(np.int64, copy=False)
            # Tensors on the GPU go to faiss as they are (its torch bridge), only the Q×k result comes back.
            import faiss.contrib.torch_utils  # noqa: F401  (lets knn_gpu take torch tensors)

            d, i = faiss.knn_gpu(self._gpu_res, _to_torch(queries).float().contiguous(), self.gallery, k)
            return d.cpu().numpy(), i.cpu().numpy().astype(np.int64, copy=False)
        return self._torch_search(queries, k, chunk_rows)

    def _torch_search(self, queries: Any, k: int, chunk_rows: int) -> tuple[np.ndarray, np.ndarray]:
        import torch

        g, g_sq = self.gallery_t, self.gallery_sq
        q_all = _to_torch(queries).to(g.device)
        out_d, out_i = [], []
        # Full float32 matmuls: TF32 would void the error bound the exactness check relies on.
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            with torch.no_grad():
                for start in range(0, len(q_all), chunk_rows):
                    q = q_all[start:start + chunk_rows]
                    q_sq = _sq_norms(q).to(q.dtype)
                    dist = torch.addmm(g_sq.unsqueeze(0), q, g.T, beta=1.0, alpha=-2.0)
                    dist.add_(q_sq.unsqueeze(1)).clamp_(min=0)
                    d, i = torch.topk(dist, k, dim=1, largest=False, sorted=True)
                    out_d.append(d.cpu().numpy())
                    out_i.append(i.cpu().numpy())
                    del dist
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous
        return np.concatenate(out_d), np.concatenate(out_i).astype(np.int64, copy=False)


def _as_numpy32(x: Any) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        x = x.detach()
        x = x.numpy() if x.device.type == "cpu" else x.cpu().numpy()  # a CPU tensor is viewed, not copied
    return np.ascontiguousarray(x, dtype=np.float32)


def _row_norms(x: Any) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64))
    return _sq_norms(x).sqrt().cpu().numpy()


def _on_cpu(x: Any) -> bool:
    return isinstance(x, np.ndarray) or x.device.type == "cpu"


def _sq_norms(x: Any) -> Any:
    """Float64 squared row norms of a tensor, on its device, without a float64 copy of the rows."""
    import torch

    return torch.linalg.vector_norm(x, dim=1, dtype=torch.float64).square()


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
    searcher = _Searcher(backend, gallery)
    q_norm = _row_norms(queries)
    g_norm_max = float(_row_norms(gallery).max())
    eps = _BOUND_FACTOR * (dim + 4) * _ROUNDOFF[backend] * (q_norm + g_norm_max) ** 2 + 1e-30
    # torch materialises a rows × G block (plus topk's copy); faiss works in small internal blocks.
    block_rows = max(1, budget_bytes // max(1, 12 * num_g)) if backend == "torch" else _MAX_QUERY_CHUNK
    job = _Job(searcher, queries, gallery, k, depth, self_pos, eps, result, stats, block_rows, budget_bytes,
               relevance)
    for start in range(0, num_q, _MAX_QUERY_CHUNK):
        _search_chunk(job, np.arange(start, min(start + _MAX_QUERY_CHUNK, num_q)), slack)
    return result, stats


@dataclass
class _Job:
    """Everything the chunk, re-rank and widening steps of one search share."""

    searcher: _Searcher
    queries: Any
    gallery: Any
    k: int
    depth: np.ndarray
    self_pos: np.ndarray
    eps: np.ndarray
    result: np.ndarray
    stats: SearchStats
    block_rows: int
    budget_bytes: int
    relevance: tuple[np.ndarray, np.ndarray] | None = None


def _search_chunk(job: _Job, rows: np.ndarray, slack: int) -> None:
    """Search one block of queries and turn the backend's lists into canonical ones.

    Consecutive backend distances closer than 2·eps form a *run* whose true order is uncertain; runs
    separated by a larger gap are certainly in the right order. So sorting by (run, exact float64
    distance, gallery position) gives the canonical order, and only members of runs of two or more
    (usually few) need their exact distance. A query whose certified part ends in a run that reaches the
    last retrieved candidate might be missing members of that run: it is searched again, wider.
    """
    k, num_g = job.k, int(job.gallery.shape[0])
    # k + 1 columns to see the gap behind the k-th neighbour, one for a possible self-match, and a
    # little slack so that a run crossing the boundary rarely reaches the end of the list.
    kk = min(k + 2 + slack, num_g)
    b_dist, b_idx = job.searcher.search(job.queries[rows[0]:rows[-1] + 1], kk, job.block_rows)
    complete = kk == num_g  # the backend returned the whole gallery: no unseen item can intrude
    is_self = b_idx == job.self_pos[rows, None]
    found = is_self.any(1)
    widen = (job.self_pos[rows] >= 0) & ~found  # self pushed out by ties at distance ~0
    drop = is_self.copy()
    drop[~found, -1] = True  # keep a uniform width: without a self-match drop the last column
    width = kk - 1
    dist = b_dist[~drop].reshape(len(rows), width).astype(np.float64)
    idx = b_idx[~drop].reshape(len(rows), width)
    depth = np.minimum(job.depth[rows], width)
    tied = np.diff(dist, axis=1) <= 2.0 * job.eps[rows, None]  # tied[:, j]: columns j and j+1 may swap
    run = np.concatenate([np.zeros((len(rows), 1), np.int64), np.cumsum(~tied, axis=1)], axis=1)
    last_certified = run[np.arange(len(rows)), depth - 1]
    if not complete:
        widen |= last_certified == run[:, -1]
    elif k > width:
        widen |= ~found  # the dropped last column was a real neighbour of a query outside the gallery
    # Exact distances for members of multi-column runs that start within the certified part.
    in_run = np.zeros_like(tied, shape=(len(rows), width))
    in_run[:, :-1] |= tied
    in_run[:, 1:] |= tied
    run_start = np.zeros((len(rows), width), dtype=bool)
    run_start[:, 0] = True
    run_start[:, 1:] = ~tied
    start_col = np.maximum.accumulate(np.where(run_start, np.arange(width)[None, :], 0), axis=1)
    uncertain = in_run & (start_col < depth[:, None]) & ~widen[:, None]
    if job.relevance is not None:
        uncertain &= _mixed_runs(job, rows, idx, tied, run)
    need = uncertain.any(1)
    if need.any():
        r_loc, c_loc = np.nonzero(uncertain)
        exact = np.zeros((len(rows), width))
        exact[r_loc, c_loc] = _exact_pair_sq_dist(job, rows[r_loc], idx[r_loc, c_loc])
        sub = np.flatnonzero(need)
        order = np.lexsort((idx[sub], exact[sub], run[sub]), axis=1)
        idx[sub] = np.take_along_axis(idx[sub], order, 1)
        job.stats.reranked += len(sub)
    take = min(k, width)
    keep = ~widen
    job.result[rows[keep], :take] = idx[keep, :take]
    if widen.any():
        job.stats.widened += int(widen.sum())
        _widen(job, rows[widen], min(2 * kk, num_g))


def _mixed_runs(job: _Job, rows: np.ndarray, idx: np.ndarray, tied: np.ndarray, run: np.ndarray) -> np.ndarray:
    """Columns whose near-tied run holds both relevant and irrelevant items (only there can order matter)."""
    q_labels, g_labels = job.relevance
    hit = g_labels[idx] == q_labels[rows, None]
    flips = tied & (hit[:, 1:] != hit[:, :-1])  # columns j, j+1 in one run with different relevance
    width = idx.shape[1]
    flat_run = run + (np.arange(len(rows)) * width)[:, None]  # run ids unique over the whole block
    mixed = np.zeros(len(rows) * width, dtype=bool)
    mixed[flat_run[:, :-1][flips]] = True
    return mixed[flat_run]


def _exact_pair_sq_dist(job: _Job, query_rows: np.ndarray, gallery_pos: np.ndarray) -> np.ndarray:
    """Float64 ``Σ(q−g)²`` for (query row, gallery position) pairs, in blocks within the budget."""
    out = np.empty(len(query_rows))
    # Larger blocks do not run faster: cap them at 64 MiB whatever the budget.
    step = max(1, min(job.budget_bytes, 64 << 20) // max(1, 24 * int(job.gallery.shape[1])))
    for start in range(0, len(query_rows), step):
        sl = slice(start, start + step)
        out[sl] = _exact_sq_dist(job.queries, job.gallery, query_rows[sl], gallery_pos[sl, None])[:, 0]
    return out


def _finalize(job: _Job, rows: np.ndarray, b_dist: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Order backend candidates canonically; write certified rows, return the rows that need more."""
    num_g, dim = int(job.gallery.shape[0]), int(job.gallery.shape[1])
    kk = cand.shape[1]
    step = max(1, min(len(rows), job.budget_bytes // max(1, kk * dim * 12)))
    failed = []
    for start in range(0, len(rows), step):
        sl = slice(start, start + step)
        sub, sub_cand = rows[sl], cand[sl]
        exact = _exact_sq_dist(job.queries, job.gallery, sub, sub_cand)
        exact[sub_cand == job.self_pos[sub, None]] = np.inf
        order = np.lexsort((sub_cand, exact), axis=1)
        cand_sorted = np.take_along_axis(sub_cand, order, 1)
        exact_sorted = np.take_along_axis(exact, order, 1)
        take = min(job.k, kk)
        top = np.where(np.isfinite(exact_sorted[:, :take]), cand_sorted[:, :take], -1)
        if kk >= num_g:
            ok = np.ones(len(sub), dtype=bool)
        else:
            # Unretrieved items have backend distance ≥ the last retrieved one, so true distance ≥ bound.
            bound = b_dist[sl, -1].astype(np.float64) - job.eps[sub]
            last = np.minimum(job.depth[sub], take) - 1
            ok = exact_sorted[np.arange(len(sub)), last] < bound
        job.result[sub[ok], :take] = top[ok]
        failed.append(sub[~ok])
    return np.concatenate(failed) if failed else np.empty(0, dtype=np.int64)


def _widen(job: _Job, rows: np.ndarray, want: int) -> None:
    """Search ``rows`` again with doubling candidate lists until their canonical top is certified."""
    num_g = int(job.gallery.shape[0])
    pending = rows
    while len(pending):
        kk = min(want, num_g)
        b_dist, cand = _search_rows(job.searcher, job.queries, pending, kk, job.block_rows)
        pending = _finalize(job, pending, b_dist, cand)
        want = min(want * 2, num_g)


def _search_rows(searcher, queries, rows, kk, block_rows) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(queries, np.ndarray):
        sub_q = queries[rows]
    else:
        import torch

        sub_q = queries[torch.as_tensor(rows, device=queries.device)]
    return searcher.search(sub_q, kk, block_rows)


def _exact_sq_dist(queries, gallery, rows, cand) -> np.ndarray:
    """Float64 ``Σ(q−g)²`` for each (query row, candidate position); exact for duplicates (0.0)."""
    if _on_cpu(queries):
        # numpy gathers are several times faster than torch's for these small float64 blocks on a CPU
        # (torch reads CPU tensors here without a copy: same memory, same arithmetic).
        q, g = _as_numpy32(queries), _as_numpy32(gallery)
        diff = g[cand].astype(np.float64)
        diff -= q[rows][:, None, :]
        diff *= diff
        return diff.sum(-1)
    import torch

    q = _to_torch(queries)
    g = _to_torch(gallery)
    rows_t = torch.as_tensor(rows, device=q.device)
    cand_t = torch.as_tensor(cand, device=g.device)
    diff = g[cand_t].double()  # in place from here: one float64 copy of the candidates
    diff.sub_(q[rows_t].unsqueeze(1))  # the float32 query rows are widened by the subtraction, not copied
    diff.mul_(diff)
    return diff.sum(-1).cpu().numpy()


def default_budget_bytes(memory_budget_mb: float | None) -> int:
    """The working-memory budget in bytes (256 MiB when the user sets none)."""
    mb = 256.0 if memory_budget_mb is None else float(memory_budget_mb)
    return int(math.floor(mb * 1024 * 1024))
