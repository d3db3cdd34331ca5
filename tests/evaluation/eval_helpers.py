"""Shared helpers of the evaluation tests: data generators and brute-force references."""

from __future__ import annotations

import numpy as np


def clustered(n_classes: int, per_class: tuple[int, int], dim: int, noise: float, seed: int = 0,
              label_offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors around random class centres, class sizes uniform in ``per_class``."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(per_class[0], per_class[1] + 1, n_classes)
    labels = np.repeat(np.arange(n_classes, dtype=np.int64), sizes) + label_offset
    centres = rng.standard_normal((n_classes, dim))
    x = np.repeat(centres, sizes, axis=0) + noise * rng.standard_normal((sizes.sum(), dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    perm = rng.permutation(len(x))
    return x[perm].astype(np.float32), labels[perm]


def brute_knn(q: np.ndarray, g: np.ndarray, self_pos: np.ndarray) -> np.ndarray:
    """Full canonical ranking: float64 Σ(q−g)², ties by gallery position, self removed (−1 padded)."""
    out = np.full((len(q), len(g)), -1, dtype=np.int64)
    for i in range(len(q)):
        d = ((g.astype(np.float64) - q[i].astype(np.float64)) ** 2).sum(1)
        order = np.lexsort((np.arange(len(g)), d))
        order = order[order != self_pos[i]]
        out[i, : len(order)] = order
    return out


def brute_retrieval(ranked_labels: list[np.ndarray], query_labels: np.ndarray, relevant: np.ndarray) -> dict:
    """Per-query reference values written directly from the definitions (loops, no vectorisation)."""
    res = {"recall@1": [], "recall@2": [], "map@r": [], "r_precision": [], "map@all": [],
           "map@all_rev": [], "map@c": [], "map@c_rev": []}
    for lab_row, y, r in zip(ranked_labels, query_labels, relevant, strict=False):
        rel = [1.0 if v == y else 0.0 for v in lab_row]
        hits, ap_r, ap_all, ap_c = 0.0, 0.0, 0.0, 0.0
        for i, v in enumerate(rel, start=1):
            hits += v
            p = hits / i
            if i <= r:
                ap_r += p * v
            if i <= r + 1:
                ap_c += p * v
            ap_all += p * v
        res["recall@1"].append(float(any(rel[:1])))
        res["recall@2"].append(float(any(rel[:2])))
        res["map@r"].append(ap_r / r)
        res["r_precision"].append(sum(rel[:r]) / r)
        res["map@all"].append(ap_all / r)
        res["map@all_rev"].append(ap_all / (r + 1))
        res["map@c"].append(ap_c / r)
        res["map@c_rev"].append(ap_c / (r + 1))
    return {k: float(np.mean(v)) for k, v in res.items()}
