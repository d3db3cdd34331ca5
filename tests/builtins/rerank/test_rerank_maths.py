"""The maths of the built-in re-rankers (αQE, DBA, k-reciprocal) against dense brute-force oracles written from the
papers' formulas."""

from __future__ import annotations

import numpy as np
import pytest

from dmlplug.evaluation.rerank_problem import gallery_knn
from dmlplug_builtins.rerank.expansion import augment_gallery, expand_queries
from dmlplug_builtins.rerank.kreciprocal import k_reciprocal


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _clustered(n: int, dim: int, classes: int, seed: int, noise: float = 0.6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim))
    return _unit(centres[rng.integers(0, classes, n)] + noise * rng.normal(size=(n, dim))).astype(np.float32)


def _dense_rank(q: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Gallery rows of each query by decreasing cosine similarity (a full Q×G matrix: the oracle may)."""
    return np.argsort(-(q.astype(np.float64) @ g.astype(np.float64).T), axis=1, kind="stable")


# ------------------------------------------------------------------------------------------------ αQE / DBA
def test_aqe_equals_the_papers_formula():
    g = _clustered(60, 8, 5, seed=1)
    q = _clustered(12, 8, 5, seed=2)
    n, alpha = 4, 3.0
    top = _dense_rank(q, g)[:, :n]
    expanded = expand_queries(q, g, top, alpha=alpha)
    for i in range(len(q)):  # Radenović et al.: q' = q + Σ_i (q·d_i)^α d_i, then L2-normalised
        v = q[i].astype(np.float64) + sum(max(float(q[i] @ g[j]), 0.0) ** alpha * g[j].astype(np.float64)
                                          for j in top[i])
        np.testing.assert_allclose(expanded[i], v / np.linalg.norm(v), atol=1e-6)
    assert not np.allclose(expanded, q, atol=1e-3)  # the expansion moved the queries


def test_aqe_with_alpha_zero_is_average_query_expansion():
    g = _clustered(30, 6, 3, seed=3)
    q = _clustered(5, 6, 3, seed=4)
    top = _dense_rank(q, g)[:, :3]
    expanded = expand_queries(q, g, top, alpha=0.0)
    mean = q.astype(np.float64) + g[top].astype(np.float64).sum(axis=1)
    np.testing.assert_allclose(expanded, _unit(mean), atol=1e-6)


def test_dba_equals_the_dense_oracle_and_searches_as_it():
    g = _clustered(80, 8, 6, seed=5)
    n, alpha = 3, 3.0
    # tiny budgets: many chunks (the neighbours come from the problem's exact kNN, as in a re-ranking)
    augmented = augment_gallery(g, gallery_knn(g, n, budget_bytes=1 << 12), alpha=alpha, budget_bytes=1 << 12)
    sims = g.astype(np.float64) @ g.astype(np.float64).T
    np.fill_diagonal(sims, -np.inf)  # its own vector is the item itself, not one of its neighbours
    oracle = np.empty_like(augmented, dtype=np.float64)
    for i in range(len(g)):
        top = np.argsort(-sims[i], kind="stable")[:n]
        v = g[i].astype(np.float64) + sum(max(sims[i, j], 0.0) ** alpha * g[j] for j in top)
        oracle[i] = v / np.linalg.norm(v)
    np.testing.assert_allclose(augmented, oracle, atol=1e-6)
    q = _clustered(10, 8, 6, seed=6)
    np.testing.assert_array_equal(_dense_rank(q, augmented), _dense_rank(q, oracle.astype(np.float32)))


def test_dba_on_a_gallery_smaller_than_n_uses_every_other_item():
    g = _clustered(3, 4, 2, seed=7)
    augmented = augment_gallery(g, gallery_knn(g, 10, budget_bytes=1 << 20), alpha=1.0)
    sims = g.astype(np.float64) @ g.astype(np.float64).T
    for i in range(3):
        v = sum(max(sims[i, j], 0.0) ** 1.0 * g[j].astype(np.float64) for j in range(3) if j != i) + g[i]
        np.testing.assert_allclose(augmented[i], v / np.linalg.norm(v), atol=1e-6)


# ------------------------------------------------------------------------------------------- k-reciprocal
def _zhong_dense(q: np.ndarray, g: np.ndarray, k1: int, k2: int, lam: float) -> np.ndarray:
    """Zhong et al.'s algorithm, written loop by loop from the paper, on the set {q} ∪ whole gallery."""
    x = np.concatenate([q[None], g]).astype(np.float64)
    n = len(x)
    d = ((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=2)  # squared Euclidean, from the differences
    d = d / d.max(axis=1, keepdims=True)
    rank = np.argsort(d, axis=1, kind="stable")

    def recip(i: int, k: int) -> list[int]:
        forward = rank[i, :k + 1]
        return [int(j) for j in forward if i in rank[j, :k + 1]]

    v = np.zeros((n, n))
    for i in range(n):
        r = recip(i, k1)
        star = set(r)
        for c in r:
            rc = recip(c, int(np.around(k1 / 2.0)))
            if len(set(rc) & set(r)) > 2.0 / 3.0 * len(rc):
                star |= set(rc)
        members = sorted(star)
        w = np.exp(-d[i, members])
        v[i, members] = w / w.sum()
    if k2 > 1:
        v = np.array([v[rank[i, :k2]].mean(axis=0) for i in range(n)])
    final = np.empty(n - 1)
    for j in range(1, n):
        jaccard = 1.0 - np.minimum(v[0], v[j]).sum() / np.maximum(v[0], v[j]).sum()
        final[j - 1] = (1 - lam) * jaccard + lam * d[0, j]
    # Ties (e.g. λ = 0 and disjoint neighbourhoods) keep the original order: by distance, then gallery row.
    return np.lexsort((np.arange(n - 1), d[0, 1:], final))


@pytest.mark.parametrize(("k1", "k2", "lam"), [(20, 6, 0.3), (5, 1, 0.0), (8, 3, 0.5)])
def test_k_reciprocal_with_the_whole_gallery_as_shortlist_equals_the_dense_oracle(k1, k2, lam):
    g = _clustered(45, 6, 5, seed=11)
    q = _clustered(7, 6, 5, seed=12)
    shortlist = _dense_rank(q, g)  # shortlist = every gallery item
    got = k_reciprocal(q, g, shortlist, k1=k1, k2=k2, lam=lam, budget_bytes=1 << 16)
    expected = np.stack([_zhong_dense(q[i], g, k1, k2, lam) for i in range(len(q))])
    np.testing.assert_array_equal(got, expected)
    assert not np.array_equal(got, shortlist)  # the re-ranking changed orders (the test can fail)


def test_k_reciprocal_keeps_missing_entries_last_and_the_shortlist_set():
    g = _clustered(30, 5, 3, seed=13)
    q = _clustered(4, 5, 3, seed=14)
    shortlist = _dense_rank(q, g)[:, :12]
    shortlist[1, 9:] = -1  # a query with fewer candidates
    got = k_reciprocal(q, g, shortlist, k1=4, k2=2)
    for row_got, row_in in zip(got, shortlist, strict=True):
        assert sorted(row_got.tolist()) == sorted(row_in.tolist())
    assert (got[1, 9:] == -1).all()
    oracle = _zhong_dense(q[1], g[shortlist[1, :9]], 4, 2, 0.3)  # the same algorithm on {q} ∪ its 9 candidates
    np.testing.assert_array_equal(got[1, :9], shortlist[1, :9][oracle])
