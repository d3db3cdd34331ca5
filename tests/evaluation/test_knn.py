import numpy as np
import pytest
from eval_helpers import brute_knn, clustered

from dmlplug.errors import RunError
from dmlplug.evaluation import EvalContext
from dmlplug.evaluation.knn import exact_knn

BACKENDS = ["faiss-cpu", "torch"]


def _tied_set(seed=0):
    """Clustered points plus exact duplicates and points on a 1/8 lattice (many exactly equal distances)."""
    x, y = clustered(40, (2, 9), 16, 0.8, seed=seed)
    rng = np.random.default_rng(seed)
    dup = rng.choice(len(x), 30, replace=False)
    lattice = (rng.integers(-4, 5, (40, 16)) / 8).astype(np.float32)
    x = np.concatenate([x, x[dup], x[dup[:5]], lattice])
    y = np.concatenate([y, y[dup], y[dup[:5]], rng.integers(0, 40, 40)])
    return x, y


@pytest.mark.parametrize("backend", BACKENDS)
def test_exact_knn_matches_brute_force_with_ties_and_self(backend):
    x, _ = _tied_set()
    self_pos = np.arange(len(x))
    got, stats = exact_knn(x, x, 12, self_pos=self_pos, backend=backend, budget_bytes=1 << 20)
    want = brute_knn(x, x, self_pos)[:, :12]
    np.testing.assert_array_equal(got, want)
    assert stats.reranked > 0  # the duplicates and the lattice force the float64 re-ranking


def test_backends_agree_exactly_on_clustered_data():
    x, y = clustered(150, (2, 12), 24, 1.0, seed=3)
    results = {}
    for backend in BACKENDS:
        ctx = EvalContext(x, y, backend=backend)
        results[backend] = ctx.knn(ctx.max_relevant).copy()
        assert ctx.backend_used == backend
    np.testing.assert_array_equal(results["faiss-cpu"], results["torch"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_duplicates_widen_the_candidate_list(backend):
    # 60 copies of one vector: the canonical order among them is by index, beyond any initial slack.
    rng = np.random.default_rng(1)
    base = rng.standard_normal((1, 8)).astype(np.float32)
    x = np.concatenate([np.repeat(base, 60, 0), rng.standard_normal((40, 8)).astype(np.float32)])
    perm = rng.permutation(len(x))
    x = x[perm]
    self_pos = np.arange(len(x))
    got, stats = exact_knn(x, x, 5, self_pos=self_pos, backend=backend, budget_bytes=1 << 20)
    np.testing.assert_array_equal(got, brute_knn(x, x, self_pos)[:, :5])
    assert stats.widened > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_query_gallery_with_overlap_and_k_beyond_gallery(backend):
    x, y = clustered(20, (2, 6), 8, 0.7, seed=5)
    rng = np.random.default_rng(0)
    q = rng.random(len(x)) < 0.5
    g = rng.random(len(x)) < 0.6
    q[0] = g[0] = True  # at least one item in both sets
    ctx = EvalContext(x, y, query_mask=q, gallery_mask=g, backend=backend)
    k = ctx.max_neighbours + 3
    got = ctx.knn(k)
    qi, gi = ctx.query_index[ctx.knn_queries], ctx.gallery_index
    want = brute_knn(x[qi], x[gi], ctx.self_pos[ctx.knn_queries])
    np.testing.assert_array_equal(got, want[:, : got.shape[1]])
    # an item in both sets never retrieves itself; others see the whole gallery
    both = ctx.self_pos[ctx.knn_queries] >= 0
    assert (got[both] == -1).sum(1).min() == 1 and (got[~both] >= 0).all()


def test_search_respects_a_small_memory_budget():
    x, y = clustered(30, (3, 5), 8, 0.5, seed=2)
    ctx_small = EvalContext(x, y, backend="torch", memory_budget_mb=0.01)
    ctx_big = EvalContext(x, y, backend="torch")
    np.testing.assert_array_equal(ctx_small.knn(10), ctx_big.knn(10))


def test_unknown_backend_and_bad_values_are_user_errors():
    x, y = clustered(5, (2, 3), 4, 0.5)
    with pytest.raises(RunError, match="unknown kNN backend"):
        EvalContext(x, y, backend="annoy")
    bad = x.copy()
    bad[0, 0] = np.nan
    with pytest.raises(RunError, match="NaN"):
        EvalContext(bad, y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_query_depth_is_exact_up_to_that_depth(backend):
    x, _ = _tied_set(seed=4)
    self_pos = np.arange(len(x))
    depth = np.random.default_rng(0).integers(1, 10, len(x))
    got, _ = exact_knn(x, x, 10, self_pos=self_pos, backend=backend, budget_bytes=1 << 20, depth=depth)
    want = brute_knn(x, x, self_pos)
    for row, d in enumerate(depth):
        np.testing.assert_array_equal(got[row, :d], want[row, :d])


def test_map_at_r_requests_r_per_query():
    x, y = clustered(20, (2, 9), 8, 0.9, seed=9)
    from dmlplug.evaluation import run_evaluators
    from dmlplug_builtins.evaluators.retrieval import RetrievalEvaluator

    ctx = EvalContext(x, y)
    run_evaluators([RetrievalEvaluator([("recall", 2), ("map_r", None)])], ctx)
    np.testing.assert_array_equal(ctx.knn_depth, np.maximum(ctx.relevant[ctx.knn_queries], 2))
