"""Positive and negative pairs with their Euclidean distances, shared by verification and OPIS.

Two ways to build the pair set (Zhang et al. 2023, the TCM paper):

* ``all``: every unordered pair of the evaluated set (small sets such as CUB, Cars). A negative pair
  belongs to the negative sets of both its classes.
* ``sampled``: for every class all its positive pairs (capped, see ``max_positives_per_class``) plus
  ``negative_ratio`` times as many negative pairs, each with one member drawn from the class and the
  other from outside it (large sets such as SOP, iNat), drawn with ``eval_context.seed``.

In leave-one-out mode pairs are taken within the evaluated set; in query/gallery mode a pair is a query
and a gallery item (never the same item), and a negative pair belongs to the query's class.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dmlplug.evaluation.context import EvalContext


@dataclass
class PairSet:
    """Pair distances with the (dense) class indices they belong to.

    Attributes:
        pos_dist: Euclidean distances of positive pairs (float64).
        pos_class: Class index of each positive pair.
        neg_dist: Euclidean distances of negative pairs, each pair once.
        neg_class_a: Class index the negative pair counts for.
        neg_class_b: Second class the pair counts for (``all`` mode, leave-one-out), else ``-1``.
        classes: Original label of each class index.
        mode: ``"all"`` or ``"sampled"``.
    """

    pos_dist: np.ndarray
    pos_class: np.ndarray
    neg_dist: np.ndarray
    neg_class_a: np.ndarray
    neg_class_b: np.ndarray
    classes: np.ndarray
    mode: str


def get_pairs(eval_context: EvalContext, mode: str = "auto", *, max_all_pairs: int = 20_000_000,
              negative_ratio: float = 10.0, max_positives_per_class: int = 100_000) -> PairSet:
    """The context's pair set (built once per set of options and cached).

    Args:
        eval_context: Evaluation context.
        mode: ``"all"``, ``"sampled"`` or ``"auto"`` (all pairs when there are at most ``max_all_pairs``).
        max_all_pairs: Threshold of ``auto``.
        negative_ratio: Sampled negatives per positive, per class.
        max_positives_per_class: In sampled mode, classes with more positive pairs are subsampled.
    """
    left, right = _sides(eval_context)
    total = len(left) * (len(left) - 1) // 2 if eval_context.leave_one_out else len(left) * len(right)
    if mode == "auto":
        mode = "all" if total <= max_all_pairs else "sampled"
    key = ("pairs", mode, negative_ratio, max_positives_per_class)
    if key not in eval_context.cache:
        if mode == "all":
            eval_context.cache[key] = _all_pairs(eval_context, left, right)
        elif mode == "sampled":
            eval_context.cache[key] = _sampled_pairs(eval_context, left, right, negative_ratio, max_positives_per_class)
        else:
            raise ValueError(f"unknown pair mode {mode!r}")
    return eval_context.cache[key]


def sample_pair_distances(eval_context: EvalContext, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Distances of ``n`` positive and ``n`` negative (query, gallery) pairs drawn uniformly with ``seed``.

    Unlike :func:`get_pairs` (every pair, or a per-class sample sized by the data), this draws a fixed number
    of pairs whatever the size of the evaluated set, for monitoring (the TensorBoard logger's distance
    histograms): memory is O(n·D). Positive pairs: a random query that has another gallery item of its
    class, and a uniformly drawn such item (never the query itself). Negative pairs: a random query and a
    uniformly drawn gallery item of another class.

    Args:
        eval_context: The evaluation context.
        n: Pairs of each kind.
        seed: Random seed.

    Returns:
        ``(positive, negative)`` float64 Euclidean distances (empty when no such pair exists).
    """
    rng = np.random.default_rng(seed)
    x = eval_context.numpy_embeddings()
    q_index, g_index = eval_context.query_index, eval_context.gallery_index
    g_labels = eval_context.labels[g_index]
    order = np.argsort(g_labels, kind="stable")
    classes, starts, counts = np.unique(g_labels[order], return_index=True, return_counts=True)
    pos = np.empty(0)
    kept = eval_context.knn_queries  # queries with at least one gallery item of their class (self excluded)
    if len(kept):
        rows = kept[rng.integers(0, len(kept), size=n)]
        q = q_index[rows]
        cls = np.searchsorted(classes, eval_context.labels[q])
        self_pos = eval_context.self_pos[rows]
        own = self_pos >= 0
        slot = starts[cls] + (rng.random(n) * (counts[cls] - own)).astype(np.int64)
        if own.any():
            # Rank of the query inside its class block; draws at or after it move one slot on.
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            own_rank = np.where(own, rank[np.maximum(self_pos, 0)], np.iinfo(np.int64).max)
            slot = slot + (slot >= own_rank)
        pos = _pair_distances(x, q, g_index[order[slot]], eval_context.budget_bytes)
    # Negatives: a gallery item outside the query's class, by drawing a rank among the non-members.
    neg = np.empty(0)
    q_cls = np.searchsorted(classes, eval_context.labels[q_index])
    clipped = np.minimum(q_cls, len(classes) - 1)
    present = (q_cls < len(classes)) & (classes[clipped] == eval_context.labels[q_index])
    members = np.where(present, counts[clipped], 0)
    eligible = np.flatnonzero(len(g_index) - members > 0)
    if len(eligible):
        rows = eligible[rng.integers(0, len(eligible), size=n)]
        m = members[rows]
        start = np.where(m > 0, starts[clipped[rows]], 0)
        r = (rng.random(n) * (len(g_index) - m)).astype(np.int64)
        neg = _pair_distances(x, q_index[rows], g_index[order[np.where(r < start, r, r + m)]],
                              eval_context.budget_bytes)
    return pos, neg


def _sides(eval_context: EvalContext) -> tuple[np.ndarray, np.ndarray]:
    return eval_context.query_index, eval_context.gallery_index


def _class_index(eval_context: EvalContext) -> tuple[np.ndarray, np.ndarray]:
    """Dense class index of every item (over the whole set) and the labels of the classes."""
    classes, inverse = np.unique(eval_context.labels, return_inverse=True)
    return inverse.astype(np.int32), classes


def _all_pairs(eval_context: EvalContext, left: np.ndarray, right: np.ndarray) -> PairSet:
    x = eval_context.numpy_embeddings()
    cls, classes = _class_index(eval_context)
    sq = np.einsum("ij,ij->i", x, x).astype(np.float32)
    pos_d, pos_c, neg_d, neg_a, neg_b = [], [], [], [], []
    block = max(1, eval_context.budget_bytes // max(1, 24 * len(right)))
    for start in range(0, len(left), block):
        rows = left[start:start + block]
        cols = right[start + 1:] if eval_context.leave_one_out else right
        if len(cols) == 0:
            continue
        d2 = sq[rows, None] + sq[None, cols] - 2.0 * (x[rows] @ x[cols].T)
        # Leave-one-out: each unordered pair once; query/gallery: every pair but an item with itself.
        valid = (cols[None, :] > rows[:, None]) if eval_context.leave_one_out else (cols[None, :] != rows[:, None])
        dist = np.sqrt(np.maximum(d2, 0.0, dtype=np.float32))
        ca, cb = cls[rows][:, None], cls[cols][None, :]
        same = (ca == cb) & valid
        diff = (ca != cb) & valid
        pos_d.append(dist[same])
        pos_c.append(np.broadcast_to(ca, same.shape)[same])
        neg_d.append(dist[diff])
        neg_a.append(np.broadcast_to(ca, diff.shape)[diff])
        if eval_context.leave_one_out:
            neg_b.append(np.broadcast_to(cb, diff.shape)[diff])
        else:
            neg_b.append(np.full(int(diff.sum()), -1, dtype=np.int32))
    return PairSet(_cat(pos_d, np.float64), _cat(pos_c, np.int32), _cat(neg_d, np.float64),
                   _cat(neg_a, np.int32), _cat(neg_b, np.int32), classes, "all")


def _sampled_pairs(eval_context: EvalContext, left: np.ndarray, right: np.ndarray, ratio: float,
                   max_pos: int) -> PairSet:
    rng = np.random.default_rng(eval_context.seed)
    x = eval_context.numpy_embeddings()
    cls, classes = _class_index(eval_context)
    left_cls, right_cls = cls[left], cls[right]
    left_order = np.argsort(left_cls, kind="stable")
    right_order = np.argsort(right_cls, kind="stable")
    l_bounds = np.searchsorted(left_cls[left_order], np.arange(len(classes) + 1))
    r_bounds = np.searchsorted(right_cls[right_order], np.arange(len(classes) + 1))
    pa, pb, pc, na, nb, nc = [], [], [], [], [], []
    for c in range(len(classes)):
        members_l = left[left_order[l_bounds[c]:l_bounds[c + 1]]]
        members_r = right[right_order[r_bounds[c]:r_bounds[c + 1]]]
        if len(members_l) == 0:
            continue
        a, b = _positive_pairs(members_l, members_r, eval_context.leave_one_out, max_pos, rng)
        if len(a) == 0:
            continue
        pa.append(a)
        pb.append(b)
        pc.append(np.full(len(a), c, dtype=np.int32))
        outside = len(right) - len(members_r)
        if outside == 0:
            continue
        count = int(round(ratio * len(a)))
        anchor = members_l[rng.integers(0, len(members_l), count)]
        # Draw from the gallery positions outside class c: sample a rank among non-members.
        ranks = rng.integers(0, outside, count)
        start, stop = r_bounds[c], r_bounds[c + 1]
        shifted = np.where(ranks >= start, ranks + (stop - start), ranks)
        na.append(anchor)
        nb.append(right[right_order[shifted]])
        nc.append(np.full(count, c, dtype=np.int32))
    pos_dist = _pair_distances(x, _cat(pa, np.int64), _cat(pb, np.int64), eval_context.budget_bytes)
    neg_dist = _pair_distances(x, _cat(na, np.int64), _cat(nb, np.int64), eval_context.budget_bytes)
    nc_all = _cat(nc, np.int32)
    return PairSet(pos_dist, _cat(pc, np.int32), neg_dist, nc_all, np.full(len(nc_all), -1, np.int32),
                   classes, "sampled")


def _positive_pairs(members_l, members_r, symmetric, max_pos, rng) -> tuple[np.ndarray, np.ndarray]:
    if symmetric:
        n = len(members_l)
        count = n * (n - 1) // 2
        if count <= max_pos:
            i, j = np.triu_indices(n, k=1)
            return members_l[i], members_l[j]
        i = rng.integers(0, n, max_pos)
        j = (i + rng.integers(1, n, max_pos)) % n  # a different member
        return members_l[i], members_l[j]
    a = np.repeat(members_l, len(members_r))
    b = np.tile(members_r, len(members_l))
    keep = a != b
    a, b = a[keep], b[keep]
    if len(a) > max_pos:
        pick = rng.choice(len(a), max_pos, replace=False)
        a, b = a[pick], b[pick]
    return a, b


def _pair_distances(x: np.ndarray, a: np.ndarray, b: np.ndarray, budget: int) -> np.ndarray:
    out = np.empty(len(a), dtype=np.float64)
    block = max(1, budget // max(1, 16 * x.shape[1]))
    for s in range(0, len(a), block):
        diff = x[a[s:s + block]].astype(np.float64) - x[b[s:s + block]]
        out[s:s + block] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return out


def _cat(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype=dtype)
