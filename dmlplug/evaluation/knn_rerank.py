"""Turning a backend's kNN lists into the canonical order: certify, re-rank near-ties, widen.

A backend's order is kept where its float32 distances are further apart than twice the error bound; runs of
near-tied neighbours are re-ordered by exact float64 distance then gallery position, and queries whose
certified part might be missing neighbours are searched again with doubling candidate lists. The reasoning is
in :mod:`dmlplug.evaluation.knn`, whose :func:`~dmlplug.evaluation.knn.exact_knn` drives these steps.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from dmlplug.evaluation.knn_search import Searcher, as_numpy32, on_cpu, to_torch

#: Fewest queries per thread when :func:`search_chunk` shares its rows among threads (below, one thread: the
#: threads' start and the per-call numpy overhead would cost more than they save).
MIN_ROWS_PER_THREAD = 1024


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


@dataclass
class SearchJob:
    """Everything the chunk, re-rank and widening steps of one search share."""

    searcher: Searcher
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
    #: The backend's first lists of every query, already computed (float32 sq. distances, positions), when
    #: the search ran for all queries at once (:mod:`~dmlplug.evaluation.knn_symmetric`); else None.
    first: tuple[np.ndarray, np.ndarray] | None = None


def search_chunk(job: SearchJob, rows: np.ndarray, slack: int, threads: int = 1) -> None:
    """Search one block of queries and turn the backend's lists into canonical ones.

    Consecutive backend distances closer than 2·eps form a *run* whose true order is uncertain; runs
    separated by a larger gap are certainly in the right order. So sorting each run by (exact float64
    distance, gallery position) gives the canonical order, and only members of runs of two or more
    (usually few) need their exact distance. A query whose certified part ends in a run that reaches the
    last retrieved candidate might be missing members of that run: it is searched again, wider.

    ``threads`` > 1 shares the rows among that many threads (numpy releases the GIL in its loops): after a
    multi-threaded search this step would otherwise run on one core (on the CUB-size set ~0.02 s of CPU, beside a
    2-thread search of ~0.17 s). Each thread writes only its own rows of ``job.result``; queries to search again,
    wider, are searched afterwards from the calling thread.
    """
    k, num_g = job.k, int(job.gallery.shape[0])
    # k + 1 columns to see the gap behind the k-th neighbour, one for a possible self-match, and a
    # little slack so that a run crossing the boundary rarely reaches the end of the list.
    kk = min(k + 2 + slack, num_g)
    if job.first is not None:
        b_dist, b_idx = (a[rows[0]:rows[-1] + 1] for a in job.first)
        kk = b_idx.shape[1]
    else:
        b_dist, b_idx = job.searcher.search(job.queries[rows[0]:rows[-1] + 1], kk, job.block_rows)
    parts = max(1, min(int(threads), len(rows) // MIN_ROWS_PER_THREAD))
    if parts == 1:
        outcomes = [_canonical(job, rows, b_dist, b_idx)]
    else:
        bounds = np.linspace(0, len(rows), parts + 1).astype(int)
        slices = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        with ThreadPoolExecutor(max_workers=parts) as pool:
            outcomes = list(pool.map(lambda sl: _canonical(job, rows[sl], b_dist[sl], b_idx[sl]), slices))
    job.stats.reranked += sum(reranked for reranked, _ in outcomes)
    widen = np.concatenate([w for _, w in outcomes])
    if len(widen):
        job.stats.widened += len(widen)
        _widen(job, widen, min(2 * kk, num_g))


def _canonical(job: SearchJob, rows: np.ndarray, b_dist: np.ndarray, b_idx: np.ndarray) -> tuple[int, np.ndarray]:
    """Write the canonical lists of ``rows`` from their backend lists; return (re-ranked count, rows to widen)."""
    k, num_g = job.k, int(job.gallery.shape[0])
    kk = b_idx.shape[1]
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
    # Exact distances for members of multi-column runs that start within the certified part: run ids grow along
    # a row, so a run starts before column depth − 1 ends exactly when its id is at most that column's.
    in_run = np.zeros_like(tied, shape=(len(rows), width))
    in_run[:, :-1] |= tied
    in_run[:, 1:] |= tied
    uncertain = in_run & (run <= np.where(widen, -1, last_certified)[:, None])
    if job.relevance is not None:
        uncertain &= _mixed_runs(job.relevance, rows, idx, tied, run)
    r_loc, c_loc = np.nonzero(uncertain)
    reranked = 0
    if len(r_loc):
        # Only the uncertain runs are re-ordered, each by (exact distance, position). np.nonzero lists them row
        # by row and column by column, so a run's members are consecutive and each run keeps its columns.
        members = idx[r_loc, c_loc]
        exact = _exact_pair_sq_dist(job, rows[r_loc], members)
        group = r_loc * width + run[r_loc, c_loc]
        idx[r_loc, c_loc] = members[np.lexsort((members, exact, group))]
        reranked = int(np.count_nonzero(uncertain.any(1)))
    take = min(k, width)
    keep = ~widen
    job.result[rows[keep], :take] = idx[keep, :take]
    return reranked, rows[widen]


def _mixed_runs(relevance: tuple[np.ndarray, np.ndarray], rows: np.ndarray, idx: np.ndarray, tied: np.ndarray,
                run: np.ndarray) -> np.ndarray:
    """Columns whose near-tied run holds both relevant and irrelevant items (only there can order matter)."""
    q_labels, g_labels = relevance
    hit = g_labels[idx] == q_labels[rows, None]
    flips = tied & (hit[:, 1:] != hit[:, :-1])  # columns j, j+1 in one run with different relevance
    width = idx.shape[1]
    flat_run = run + (np.arange(len(rows)) * width)[:, None]  # run ids unique over the whole block
    mixed = np.zeros(len(rows) * width, dtype=bool)
    mixed[flat_run[:, :-1][flips]] = True
    return mixed[flat_run]


def _exact_pair_sq_dist(job: SearchJob, query_rows: np.ndarray, gallery_pos: np.ndarray) -> np.ndarray:
    """Float64 ``Σ(q−g)²`` for (query row, gallery position) pairs, in blocks within the budget."""
    out = np.empty(len(query_rows))
    # Blocks of about 2 MiB of float64 differences stay in the CPU's cache through the subtract, square and sum
    # passes: twice as fast as 64 MiB blocks on the CUB-size set (benchmarks/eval_speed.py), and no slower on
    # a GPU, where the pairs are few next to the search.
    step = max(1, min(job.budget_bytes, 2 << 20) // max(1, 24 * int(job.gallery.shape[1])))
    for start in range(0, len(query_rows), step):
        sl = slice(start, start + step)
        out[sl] = _exact_sq_dist(job.queries, job.gallery, query_rows[sl], gallery_pos[sl, None])[:, 0]
    return out


def _finalize(job: SearchJob, rows: np.ndarray, b_dist: np.ndarray, cand: np.ndarray) -> np.ndarray:
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


def _widen(job: SearchJob, rows: np.ndarray, want: int) -> None:
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
    if on_cpu(queries):
        # numpy gathers are several times faster than torch's for these small float64 blocks on a CPU
        # (torch reads CPU tensors here without a copy: same memory, same arithmetic).
        q, g = as_numpy32(queries), as_numpy32(gallery)
        # One pass from the float32 gathers to float64 differences (the widening casts are exact, so this is
        # the same arithmetic as casting first), squared in place, summed along the contiguous last axis.
        diff = np.subtract(g[cand], q[rows][:, None, :], dtype=np.float64)
        np.multiply(diff, diff, out=diff)
        return diff.sum(-1)
    import torch

    q = to_torch(queries)
    g = to_torch(gallery)
    rows_t = torch.as_tensor(rows, device=q.device)
    cand_t = torch.as_tensor(cand, device=g.device)
    diff = g[cand_t].double()  # in place from here: one float64 copy of the candidates
    diff.sub_(q[rows_t].unsqueeze(1))  # the float32 query rows are widened by the subtraction, not copied
    diff.mul_(diff)
    return diff.sum(-1).cpu().numpy()
