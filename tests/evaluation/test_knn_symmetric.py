"""The half-product first search of leave-one-out (dmlplug.evaluation.knn_symmetric) against brute force.

Small sets are pushed through many blocks (partial ones included) by shrinking the block size, and the
exact_knn tests lower the thresholds so the symmetric path is taken, which a spy proves.
"""

import faiss
import numpy as np
import pytest
from eval_helpers import brute_knn, clustered

from dmlplug.evaluation import EvalContext, knn_rerank, knn_symmetric
from dmlplug.evaluation import knn as knn_module
from dmlplug.evaluation.knn import exact_knn
from dmlplug.evaluation.knn_symmetric import symmetric_knn


def _tied_set(seed=0, dim=16):
    """Clustered points plus exact duplicates and points on a 1/8 lattice (many exactly equal distances)."""
    x, y = clustered(40, (2, 9), dim, 0.8, seed=seed)
    rng = np.random.default_rng(seed)
    dup = rng.choice(len(x), 30, replace=False)
    lattice = (rng.integers(-4, 5, (40, dim)) / 8).astype(np.float32)
    x = np.concatenate([x, x[dup], x[dup[:5]], lattice])
    y = np.concatenate([y, y[dup], y[dup[:5]], rng.integers(0, 40, 40)])
    return np.ascontiguousarray(x), y


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 16 rows, the symmetric path from 1 dimension and 16 queries on, and a spy on its calls."""
    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs["threads"])
        return symmetric_knn(*args, **kwargs)

    monkeypatch.setattr(knn_symmetric, "BLOCK_ROWS", 16)
    monkeypatch.setattr(knn_module, "BLOCK_ROWS", 16)
    monkeypatch.setattr(knn_module, "MIN_DIM", 1)
    monkeypatch.setattr(knn_module, "symmetric_knn", spy)
    return calls


@pytest.fixture(params=[1, 3])
def omp_threads(request):
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(request.param)
    yield request.param
    faiss.omp_set_num_threads(before)


@pytest.mark.parametrize("threads", [1, 3])
def test_symmetric_lists_are_a_true_top_k_within_the_error_bound(threads):
    x, _ = _tied_set(seed=1, dim=24)
    k = 11
    # A 4 KiB budget makes 16-row blocks: 19 block rows, the last one partial.
    before = faiss.omp_get_max_threads()
    dist, idx = symmetric_knn(x, k, threads=threads, budget_bytes=4096)
    assert faiss.omp_get_max_threads() == before  # the caller's thread setting is left as it was
    x64 = x.astype(np.float64)
    true = ((x64[:, None, :] - x64[None, :, :]) ** 2).sum(-1)
    norms = np.linalg.norm(x64, axis=1)
    eps = 1.1 * (x.shape[1] + 4) * 2.0**-24 * (norms[:, None] + norms.max()) ** 2
    assert dist.dtype == np.float32 and idx.dtype == np.int64 and idx.shape == (len(x), k)
    assert (np.diff(dist, axis=1) >= 0).all()  # ascending, like faiss.knn
    rows = np.arange(len(x))[:, None]
    assert all(len(set(r)) == k for r in idx.tolist())  # k distinct items per row, none missing (-1)
    # Each value is the pair's distance within the bound, and nothing left out is closer than what was kept
    # by more than twice the bound (ties and duplicates may be kept in any order).
    assert (np.abs(dist - true[rows, idx]) <= eps).all()
    left_out = true.copy()
    left_out[rows, idx] = np.inf
    assert (true[rows, idx].max(1) <= left_out.min(1) + 2 * eps[:, 0]).all()
    assert (true[rows, idx] <= eps).any(1).all()  # the item itself (distance 0) is always among them


def test_symmetric_lists_match_faiss_where_not_tied():
    x, _ = clustered(30, (5, 12), 32, 1.0, seed=7)
    dist, idx = symmetric_knn(x, 8, threads=2, budget_bytes=4096)
    f_dist, f_idx = faiss.knn(x, x, 8)
    np.testing.assert_allclose(dist, f_dist, atol=1e-5)
    assert (idx == f_idx).mean() > 0.99  # only float32 near-ties may come out in another order


def test_exact_knn_through_the_symmetric_path_is_canonical_with_ties_and_duplicates(small_blocks, omp_threads):
    x, _ = _tied_set()
    self_pos = np.arange(len(x))
    got, stats = exact_knn(x, x, 12, self_pos=self_pos, backend="faiss-cpu", budget_bytes=1 << 20)
    np.testing.assert_array_equal(got, brute_knn(x, x, self_pos)[:, :12])
    assert small_blocks == [omp_threads] and stats.reranked > 0


def test_many_duplicates_widen_after_the_symmetric_search(small_blocks):
    rng = np.random.default_rng(1)
    base = rng.standard_normal((1, 8)).astype(np.float32)
    x = np.concatenate([np.repeat(base, 60, 0), rng.standard_normal((40, 8)).astype(np.float32)])
    x = np.ascontiguousarray(x[rng.permutation(len(x))])
    self_pos = np.arange(len(x))
    got, stats = exact_knn(x, x, 5, self_pos=self_pos, backend="faiss-cpu", budget_bytes=1 << 20)
    np.testing.assert_array_equal(got, brute_knn(x, x, self_pos)[:, :5])
    assert small_blocks and stats.widened > 0


def test_per_query_depth_through_the_symmetric_path(small_blocks):
    x, _ = _tied_set(seed=4)
    self_pos = np.arange(len(x))
    depth = np.random.default_rng(0).integers(1, 10, len(x))
    got, _ = exact_knn(x, x, 10, self_pos=self_pos, backend="faiss-cpu", budget_bytes=1 << 20, depth=depth)
    want = brute_knn(x, x, self_pos)
    for row, d in enumerate(depth):
        np.testing.assert_array_equal(got[row, :d], want[row, :d])
    assert small_blocks


def test_metrics_equal_the_torch_backend_and_the_plain_faiss_path(small_blocks, monkeypatch):
    from dmlplug.evaluation import run_evaluators
    from dmlplug_builtins.evaluators.retrieval import RetrievalEvaluator

    x, y = _tied_set(seed=2)
    spec = [("recall", 1), ("recall", 4), ("map_r", None), ("r_precision", None)]
    values, neighbours = {}, {}
    for name, backend in (("symmetric", "faiss-cpu"), ("torch", "torch")):
        ctx = EvalContext(x, y, backend=backend)
        values[name] = run_evaluators([RetrievalEvaluator(spec)], ctx)
        neighbours[name] = ctx.knn(ctx.max_relevant).copy()
    assert len(small_blocks) == 2  # the relevance-only search, then the full kNN
    monkeypatch.setattr(knn_module, "MIN_DIM", 10**6)  # the plain faiss search, chunk by chunk
    ctx = EvalContext(x, y, backend="faiss-cpu")
    values["faiss"] = run_evaluators([RetrievalEvaluator(spec)], ctx)
    assert len(small_blocks) == 2
    assert values["symmetric"] == values["torch"] == values["faiss"]
    np.testing.assert_array_equal(neighbours["symmetric"], neighbours["torch"])


def test_no_symmetric_search_for_query_gallery_splits_or_a_tiny_budget(small_blocks):
    x, y = _tied_set(seed=3)
    q = np.zeros(len(x), dtype=bool)
    q[::3] = True
    EvalContext(x, y, query_mask=q, gallery_mask=~q, backend="faiss-cpu").knn(5)
    assert small_blocks == []
    self_pos = np.arange(len(x))
    got, _ = exact_knn(x, x, 6, self_pos=self_pos, backend="faiss-cpu", budget_bytes=4096)
    assert small_blocks == []  # every thread's heaps for all the queries would not fit
    np.testing.assert_array_equal(got, brute_knn(x, x, self_pos)[:, :6])


def test_one_set_of_heaps_for_all_threads_fits_the_budget(small_blocks, omp_threads):
    x, _ = _tied_set(seed=5)
    self_pos = np.arange(len(x))
    width = 6 + 2 + 8  # k + 2 + slack
    budget = 2 * len(x) * width * 12  # the heaps of one thread, not of three
    got, _ = exact_knn(x, x, 6, self_pos=self_pos, backend="faiss-cpu", budget_bytes=budget)
    assert small_blocks == [omp_threads]
    np.testing.assert_array_equal(got, brute_knn(x, x, self_pos)[:, :6])


@pytest.mark.parametrize("relevance", [False, True])
def test_rows_shared_among_threads_give_the_one_thread_result(small_blocks, monkeypatch, relevance):
    x, y = _tied_set(seed=6)
    self_pos = np.arange(len(x))
    depth = np.random.default_rng(1).integers(1, 9, len(x))
    parts = []
    canonical = knn_rerank._canonical

    def spy(job, rows, *args):
        parts.append(len(rows))
        return canonical(job, rows, *args)

    monkeypatch.setattr(knn_rerank, "_canonical", spy)
    monkeypatch.setattr(knn_rerank, "MIN_ROWS_PER_THREAD", 16)
    kwargs = {"self_pos": self_pos, "backend": "faiss-cpu", "budget_bytes": 1 << 20, "depth": depth,
              "relevance": (y, y) if relevance else None}
    results = {}
    before = faiss.omp_get_max_threads()
    try:
        for threads in (1, 3):
            faiss.omp_set_num_threads(threads)
            results[threads] = exact_knn(x, x, 8, **kwargs)
    finally:
        faiss.omp_set_num_threads(before)
    assert parts[0] == len(x) and sorted(parts[1:]) == sorted(len(p) for p in np.array_split(self_pos, 3))
    (one, stats_one), (three, stats_three) = results[1], results[3]
    assert stats_one.reranked > 0 and stats_three.reranked > 0
    want = brute_knn(x, x, self_pos)
    for row, d in enumerate(depth):
        for got in (one, three):
            if not relevance:
                np.testing.assert_array_equal(got[row, :d], want[row, :d])
            else:  # canonical up to swaps of equally relevant neighbours
                np.testing.assert_array_equal(y[got[row, :d]] == y[row], y[want[row, :d]] == y[row])


def test_blas_is_single_threaded_while_the_blocks_are_multiplied():
    from threadpoolctl import threadpool_info

    def blas_threads():
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    before = blas_threads()
    for _ in range(2):  # the controller made for the first search serves the next ones
        with knn_symmetric._serial_blas():
            assert set(blas_threads()) == {1}
        assert blas_threads() == before


def test_an_error_in_one_thread_reaches_the_caller_without_stalling_the_others():
    x, _ = _tied_set(seed=7)
    with pytest.raises(TypeError):  # float64 rows cannot be written into the float32 norms of each share
        symmetric_knn(x.astype(np.float64), 5, threads=3, budget_bytes=4096)
