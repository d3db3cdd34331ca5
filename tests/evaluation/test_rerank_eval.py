"""[evaluation] rerank: re-ranked kNN metrics equal brute-force metrics over the oracle's re-ranked lists."""

from __future__ import annotations

import numpy as np
import pytest

import dmlplug
from dmlplug.errors import ComponentError
from dmlplug.evaluation import EvalContext
from dmlplug.evaluation.rerank_eval import rerank_metrics
from dmlplug.evaluation.rerank_spec import parse_rerank_list
from dmlplug.plugins import get_host
from tests.builtins.rerank.test_rerank_maths import _zhong_dense


def _metrics_of_ranking(order: np.ndarray, q_labels: np.ndarray, g_labels: np.ndarray) -> dict[str, float]:
    """recall@1/2 and MAP@R of full rankings (rows: queries, gallery positions), the textbook way."""
    hits = g_labels[order] == q_labels[:, None]
    r = hits.sum(axis=1)
    keep = r > 0
    hits, r = hits[keep], r[keep]
    precision = np.cumsum(hits, axis=1) / np.arange(1, hits.shape[1] + 1)
    map_r = np.array([(precision[i, :r[i]] * hits[i, :r[i]]).sum() / r[i] for i in range(len(r))])
    return {"recall@1": float(hits[:, 0].mean()), "recall@2": float(hits[:, :2].any(1).mean()),
            "map@r": float(map_r.mean())}


def _oracle_rank(q: np.ndarray, g: np.ndarray, self_pos: np.ndarray) -> np.ndarray:
    d = ((q[:, None, :].astype(np.float64) - g[None].astype(np.float64)) ** 2).sum(-1)
    for i, s in enumerate(self_pos):
        if s >= 0:
            d[i, s] = np.inf
    order = np.argsort(d, axis=1, kind="stable")
    return np.stack([row[row != s] for row, s in zip(order, self_pos, strict=True)]) if (self_pos >= 0).all() \
        else order


def _weighted(c: np.ndarray, g: np.ndarray, rows: np.ndarray, alpha: float) -> np.ndarray:
    v = c.astype(np.float64) + sum(max(float(c @ g[j]), 0.0) ** alpha * g[j].astype(np.float64) for j in rows)
    return v / np.linalg.norm(v)


def _data(n: int = 70, seed: int = 21) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 7, n)
    centres = rng.normal(size=(7, 6))
    x = centres[labels] + 1.2 * rng.normal(size=(n, 6))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), labels


@pytest.mark.parametrize("spec", ["aqe:n=3,alpha=3", "dba:n=4,alpha=2", "krnn:k1=6,k2=3,lambda=0.3,shortlist=100"])
def test_leave_one_out_reranked_metrics_equal_the_oracle(spec):
    x, y = _data()
    n = len(x)
    self_pos = np.arange(n)
    plain = _oracle_rank(x, x, self_pos)
    s = parse_rerank_list(spec, registry=get_host().registry)[0]
    if s.name == "aqe":
        q2 = np.stack([_weighted(x[i], x, plain[i, :3], 3.0) for i in range(n)]).astype(np.float32)
        order = _oracle_rank(q2, x, self_pos)
    elif s.name == "dba":
        g2 = np.stack([_weighted(x[i], x, plain[i, :4], 2.0) for i in range(n)]).astype(np.float32)
        order = _oracle_rank(x, g2, self_pos)
    else:  # shortlist 100 > the 69 other items: the whole gallery minus the query itself
        order = np.stack([plain[i][_zhong_dense(x[i], x[plain[i]], 6, 3, 0.3)] for i in range(n)])
    expected = _metrics_of_ranking(order, y, y)
    got = dmlplug.evaluate(x, y, ["retrieval"], rerank=spec)
    for key, value in expected.items():
        assert got[f"{key}+{s.name}"] == pytest.approx(value, abs=1e-12), key
    assert got["recall@1"] == pytest.approx(_metrics_of_ranking(plain, y, y)["recall@1"], abs=1e-12)
    assert any(got[f"{k}+{s.name}"] != got[k] for k in expected)  # the method changed something: the test can fail
    assert f"excluded_queries+{s.name}" not in got


def test_query_gallery_split_with_krnn_shortlist_shorter_than_the_gallery():
    x, y = _data(60, seed=22)
    query = np.zeros(60, bool)
    query[:20] = True
    gallery = ~query
    q, g = x[query], x[gallery]
    plain = _oracle_rank(q, g, np.full(20, -1))
    shortlist = 15
    head = np.stack([plain[i, :shortlist][_zhong_dense(q[i], g[plain[i, :shortlist]], 20, 6, 0.3)]
                     for i in range(20)])
    order = np.concatenate([head, plain[:, shortlist:]], axis=1)  # beyond the shortlist: exact order
    expected = _metrics_of_ranking(order, y[query], y[gallery])
    context = EvalContext(x, y, query_mask=query, gallery_mask=gallery)
    evaluators = dmlplug.evaluation.api.build_evaluators(["retrieval"], dmlplug.plugin_host())
    specs = parse_rerank_list({"name": "krnn", "shortlist": shortlist, "label": "k15"}, registry=get_host().registry)
    got = rerank_metrics(evaluators, context, specs)
    assert got["map@r+k15"] == pytest.approx(expected["map@r"], abs=1e-12)
    assert got["recall@1+k15"] == pytest.approx(expected["recall@1"], abs=1e-12)


@pytest.mark.parametrize("spec", ["aqe:n=3,alpha=3", "dba:n=4,alpha=2"])
def test_query_gallery_split_expansion_equals_the_oracle(spec):
    """αQE expands each query with its top-n *gallery* items; DBA augments each gallery item with its top-n other
    gallery items. Neither may look at the other queries, and no query is excluded from its own ranking."""
    x, y = _data(60, seed=23)
    query = np.zeros(60, bool)
    query[::3] = True
    gallery = ~query
    q, g = x[query], x[gallery]
    nq, ng = len(q), len(g)
    plain = _oracle_rank(q, g, np.full(nq, -1))
    s = parse_rerank_list(spec, registry=get_host().registry)[0]
    if s.name == "aqe":
        q2 = np.stack([_weighted(q[i], g, plain[i, :3], 3.0) for i in range(nq)]).astype(np.float32)
        order = _oracle_rank(q2, g, np.full(nq, -1))
    else:
        among_gallery = _oracle_rank(g, g, np.arange(ng))  # each gallery item's neighbours, itself excluded
        g2 = np.stack([_weighted(g[j], g, among_gallery[j, :4], 2.0) for j in range(ng)]).astype(np.float32)
        order = _oracle_rank(q, g2, np.full(nq, -1))
    expected = _metrics_of_ranking(order, y[query], y[gallery])
    context = EvalContext(x, y, query_mask=query, gallery_mask=gallery)
    evaluators = dmlplug.evaluation.api.build_evaluators(["retrieval"], dmlplug.plugin_host())
    got = rerank_metrics(evaluators, context, [s])
    for key, value in expected.items():
        assert got[f"{key}+{s.name}"] == pytest.approx(value, abs=1e-12), key
    plain_metrics = _metrics_of_ranking(plain, y[query], y[gallery])
    assert any(got[f"{k}+{s.name}"] != pytest.approx(plain_metrics[k], abs=1e-12) for k in expected)  # it can fail


def test_only_knn_evaluators_are_rerun_and_bad_specs_fail_first():
    x, y = _data(40, seed=23)
    got = dmlplug.evaluate(x, y, ["recall", "nmi"], rerank=["aqe", {"name": "aqe", "n": 1, "label": "aqe1"}])
    assert {"recall@1+aqe", "recall@1+aqe1"} <= set(got)
    assert not any(key.startswith("nmi+") for key in got)
    with pytest.raises(ComponentError, match="unknown reranker 'qe'"):
        dmlplug.evaluate(x, y, ["recall"], rerank="qe")
