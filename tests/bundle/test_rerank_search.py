"""`dmlplug search --rerank`: each method over an index equals the dense oracle; indexes without float32
vectors are refused; the command line and the Python API give the same matches."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dmlplug
from dmlplug.bundle.errors import BundleError
from dmlplug.bundle.index import ExactIndex, build_index
from dmlplug.bundle.rerank_search import gallery_vectors, reranked_search
from dmlplug.evaluation.rerank_spec import parse_rerank as parse
from dmlplug.plugins import get_host
from tests.builtins.rerank.test_rerank_maths import _clustered, _dense_rank, _zhong_dense


def parse_rerank(text):
    return parse(text, registry=get_host().registry)


def _weighted(c: np.ndarray, g: np.ndarray, rows: np.ndarray, alpha: float) -> np.ndarray:
    v = c.astype(np.float64) + sum(max(float(c @ g[j]), 0.0) ** alpha * g[j].astype(np.float64) for j in rows)
    return v / np.linalg.norm(v)


@pytest.fixture(scope="module")
def vectors():
    return _clustered(120, 16, 8, seed=31), _clustered(9, 16, 8, seed=32)


def test_each_method_over_an_exact_index_equals_the_dense_oracle(vectors):
    g, q = vectors
    index = ExactIndex(g, [f"g{i}" for i in range(len(g))])
    k = 10
    plain = _dense_rank(q, g)
    aqe = np.stack([_weighted(q[i], g, plain[i, :3], 3.0) for i in range(len(q))])
    top = np.argsort(-(g @ g.T - 2 * np.eye(len(g))), axis=1, kind="stable")[:, :4]  # each item's 4 others
    dba = np.stack([_weighted(g[i], g, top[i], 3.0) for i in range(len(g))])
    expected = {
        "aqe:n=3": _dense_rank(aqe.astype(np.float32), g)[:, :k],
        "dba:n=4": _dense_rank(q, dba.astype(np.float32))[:, :k],
        "krnn:shortlist=200": np.stack([plain[i][_zhong_dense(q[i], g[plain[i]], 20, 6, 0.3)] for i in range(len(q))])
        [:, :k],
    }
    for text, rows_expected in expected.items():
        sims, rows = reranked_search(index, q, k, parse_rerank(text))
        np.testing.assert_array_equal(rows, rows_expected, err_msg=text)
        np.testing.assert_allclose(sims, np.einsum("qd,qkd->qk", q, g[rows]), atol=1e-6)
        assert not np.array_equal(rows, plain[:, :k]), text  # re-ranking changed something: the test can fail


@pytest.mark.parametrize("name", ["hnsw", "ivf", "binary"])
def test_indexes_with_float_vectors_give_them_back_by_label(vectors, name, codec):
    g, q = vectors
    index = build_index(g, [str(i) for i in range(len(g))], codec(name))
    np.testing.assert_array_equal(gallery_vectors(index, parse_rerank("dba")), g)  # labels are gallery rows
    _, found = reranked_search(index, q, 5, parse_rerank("krnn:k1=5,shortlist=30"))
    assert found.shape == (len(q), 5) and (found >= 0).all()
    if name != "hnsw":  # hnsw cannot remove items
        index.remove(np.array([0, 3]))
        vectors_after = gallery_vectors(index, parse_rerank("dba"))
        assert not vectors_after[[0, 3]].any()
        np.testing.assert_array_equal(vectors_after[1], g[1])
        for text in ("dba:n=3", "aqe:n=2", "krnn:k1=5,shortlist=30"):
            _, found = reranked_search(index, q, 5, parse_rerank(text))
            assert not np.isin(found, [0, 3]).any(), text  # a removed item never comes back


@pytest.mark.parametrize("name", ["int8", "pq", "binary:rescore_from=int8"])
def test_an_index_of_compressed_codes_is_refused_with_the_indexes_that_rerank(vectors, name, codec):
    g, _ = vectors
    index = build_index(g, [str(i) for i in range(len(g))], codec(name))
    with pytest.raises(BundleError, match="keeps only compressed codes") as info:
        gallery_vectors(index, parse_rerank("dba"))
    assert "--codec float32 (the default), ivf, hnsw or binary" in str(info.value)


def test_search_rerank_on_the_command_line(onnx_bundle, image_folder, cli, tmp_path):
    paths = sorted(str(p) for p in image_folder.rglob("*.png"))
    code, _, err = cli("index", onnx_bundle, image_folder, "--out", tmp_path / "index", "-q")
    assert code == 0, err
    code, out, err = cli("search", onnx_bundle, tmp_path / "index", paths[2], paths[7], "--k", "6", "--json",
                         "--rerank", "krnn:k1=4,k2=2,shortlist=24")
    assert code == 0, err
    results = json.loads(out)
    bundle = dmlplug.load_bundle(onnx_bundle)
    assert results == bundle.search([paths[2], paths[7]], tmp_path / "index", k=6,
                                    rerank={"name": "krnn", "k1": 4, "k2": 2, "shortlist": 24})
    assert [len(r["matches"]) for r in results] == [6, 6]
    code, out, err = cli("search", onnx_bundle, tmp_path / "index", paths[2], "--rerank", "aqe:alpha=-1")
    assert code == 2 and "reranker 'aqe'" in err and "--rerank.alpha: Input should be greater than or equal to 0" \
        in err and "dmlplug list rerankers --params" in err and "Traceback" not in err
