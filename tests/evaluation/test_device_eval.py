"""Device-resident evaluation: tensors are searched where they are, with the same canonical results.

No GPU is needed: the CUDA code path is the tensor path, exercised here with CPU tensors and the torch backend.
"""

import numpy as np
import pytest
import torch
from eval_helpers import brute_knn, brute_retrieval, clustered
from test_knn import _tied_set

from dmlplug.evaluation import EvalContext, run_evaluators
from dmlplug.evaluation.knn import exact_knn
from dmlplug_builtins.evaluators.retrieval import RetrievalEvaluator

SPECS = [("recall", 1), ("recall", 2), ("map_r", None), ("r_precision", None), ("map_c", "standard")]


def _metrics(ctx):
    return run_evaluators([RetrievalEvaluator(SPECS)], ctx)


@pytest.mark.parametrize("data", ["clustered", "tied"])
def test_torch_on_a_tensor_equals_faiss_on_numpy_neighbours_and_metrics(data):
    x, y = clustered(60, (2, 9), 16, 1.0, seed=7) if data == "clustered" else _tied_set(seed=2)
    on_tensor = EvalContext(torch.from_numpy(x), torch.from_numpy(y), backend="torch")
    on_numpy = EvalContext(x, y, backend="faiss-cpu")
    assert isinstance(on_tensor.embeddings, torch.Tensor) and on_tensor.backend_used == "torch"
    got, want = _metrics(on_tensor), _metrics(on_numpy)
    assert got == want  # bit-identical, not approximately equal
    # and both are the metrics of the brute-force canonical ranking
    kept = on_numpy.knn_queries
    ranked = brute_knn(x, x, np.arange(len(x)))[kept]
    reference = brute_retrieval([y[r[r >= 0]] for r in ranked], y[kept], on_numpy.relevant[kept])
    for key in ("recall@1", "recall@2", "map@r", "r_precision", "map@c"):
        assert got[key] == pytest.approx(reference[key], abs=1e-12)
    k = on_numpy.max_relevant + 1
    np.testing.assert_array_equal(on_tensor.knn(k), on_numpy.knn(k))
    np.testing.assert_array_equal(on_tensor.knn(k)[:, :k], ranked[:, :k])


def test_a_tensor_is_searched_without_moving_the_embedding_matrix(monkeypatch):
    x, y = clustered(40, (2, 8), 12, 0.9, seed=1)
    moved = []
    original = torch.Tensor.cpu

    def spy(self, *args, **kwargs):
        moved.append(tuple(self.shape))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "cpu", spy)
    ctx = EvalContext(torch.from_numpy(x), y, backend="torch")
    _metrics(ctx)
    ctx.knn(5)
    assert ctx.knn_used and "cpu_embeddings" not in ctx.cache
    assert x.shape not in moved  # only Q×k lists, norms and labels may come to the host


@pytest.mark.parametrize("backend", ["faiss-cpu", "torch"])
def test_relevance_mode_keeps_the_canonical_hits_and_re_ranks_less(backend):
    x, y = _tied_set(seed=4)
    y = y.copy()
    self_pos = np.arange(len(x))
    want = brute_knn(x, x, self_pos)[:, :12]
    want_hits = y[want] == y[:, None]
    full, full_stats = exact_knn(x, x, 12, self_pos=self_pos, backend=backend, budget_bytes=1 << 20)
    rel, rel_stats = exact_knn(x, x, 12, self_pos=self_pos, backend=backend, budget_bytes=1 << 20,
                               relevance=(y, y))
    np.testing.assert_array_equal(full, want)
    np.testing.assert_array_equal(y[rel] == y[:, None], want_hits)
    # the duplicates share their label: their ties need no re-ranking for the relevance pattern
    assert rel_stats.reranked < full_stats.reranked


@pytest.mark.parametrize("backend", ["faiss-cpu", "torch"])
def test_near_ties_at_float32_resolution_are_ordered_exactly(backend):
    # Gallery points at radii 1 + j·2⁻²³ (a few float32 ulps apart) around each query: every gap is below the
    # float32 rounding of the distance expansion, so only the float64 re-ranking can order them.
    rng = np.random.default_rng(3)
    dim, per = 32, 24
    queries = rng.standard_normal((6, dim)).astype(np.float32)
    blocks = []
    for q in queries:
        directions = rng.standard_normal((per, dim))
        directions /= np.linalg.norm(directions, axis=1, keepdims=True)
        radii = 1.0 + rng.integers(0, 6, per) * 2.0**-23
        blocks.append((q + directions * radii[:, None]).astype(np.float32))
    gallery = np.concatenate(blocks)
    self_pos = np.full(len(queries), -1)
    got, stats = exact_knn(torch.from_numpy(queries) if backend == "torch" else queries, gallery, 20,
                           self_pos=self_pos, backend=backend, budget_bytes=1 << 20)
    np.testing.assert_array_equal(got, brute_knn(queries, gallery, self_pos)[:, :20])
    assert stats.reranked == len(queries)


def test_no_valid_query_warns_and_reports_the_excluded_queries():
    x, y = clustered(6, (3, 3), 4, 0.5, seed=0)
    query = np.isin(y, [0, 1])
    gallery = ~query  # no query class is in the gallery: every query is lone
    ctx = EvalContext(x, y, query_mask=query, gallery_mask=gallery)
    with pytest.warns(RuntimeWarning, match="no valid query"):
        metrics = run_evaluators([RetrievalEvaluator([("recall", 1)])], ctx)
    assert metrics["excluded_queries"] == float(query.sum())
    assert np.isnan(metrics["recall@1"])


def test_embed_loader_keeps_the_embeddings_on_the_model_device():
    from torch.utils.data import DataLoader

    from dmlplug.engine.data import embed_loader

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 2)

        def embed(self, images):
            return self.linear(images)

    items = [(torch.full((3,), float(i)), i % 2, i) for i in range(5)]
    model = Model()
    emb, labels = embed_loader(model, DataLoader(items, batch_size=2), "cpu")
    assert isinstance(emb, torch.Tensor) and emb.dtype == torch.float32 and emb.device.type == "cpu"
    torch.testing.assert_close(emb, model.linear(torch.stack([it[0] for it in items])).detach())
    np.testing.assert_array_equal(labels, [0, 1, 0, 1, 0])
    assert labels.dtype == np.int64
