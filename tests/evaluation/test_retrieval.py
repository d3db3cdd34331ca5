import numpy as np
import pytest
import torch
from eval_helpers import brute_knn, brute_retrieval, clustered
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

from dmlplug.evaluation import EvalContext, run_evaluators
from dmlplug_builtins.evaluators.retrieval import RetrievalEvaluator

ALL_SPECS = [("recall", 1), ("recall", 2), ("map_r", None), ("r_precision", None),
             ("map_k", (1000, "standard")), ("map_k", (1000, "revisiting")),
             ("map_c", "standard"), ("map_c", "revisiting")]
PML = {"precision_at_1": "recall@1", "mean_average_precision_at_r": "map@r", "r_precision": "r_precision"}


def evaluate(x, y, specs=ALL_SPECS, **options):
    ctx = EvalContext(x, y, **options)
    return run_evaluators([RetrievalEvaluator(specs)], ctx), ctx


def test_six_point_oracle_methods_7_1():
    x = np.array([0.0, 0.1, 0.5, 0.56, 1.03, 1.2], dtype=np.float32)[:, None]
    y = np.array([0, 0, 1, 1, 0, 1])
    for backend in ("faiss-cpu", "torch"):
        m, _ = evaluate(x, y, backend=backend)
        assert m["recall@1"] == pytest.approx(0.6667, abs=1e-4)
        assert m["recall@2"] == pytest.approx(0.8333, abs=1e-4)
        assert m["map@r"] == pytest.approx(0.3750, abs=1e-4)
        assert m["r_precision"] == pytest.approx(0.4167, abs=1e-4)
        assert m["map@1000"] == pytest.approx(0.6347, abs=1e-4)  # PML mean_average_precision, k = all
        assert m["map@c_revisiting"] == pytest.approx(0.2870, abs=1e-4)
        assert m["map@1000_revisiting"] == pytest.approx(0.4231, abs=1e-4)
        assert m["excluded_queries"] == 0


def _pml(x, y, **kwargs):
    calc = AccuracyCalculator(include=tuple(PML), k="max_bin_count", device=torch.device("cpu"), **kwargs)
    return {PML[k]: v for k, v in calc.get_accuracy(torch.from_numpy(x), torch.from_numpy(y)).items()}


@pytest.mark.parametrize("seed", [0, 1])
def test_equal_to_pml_accuracy_calculator(seed):
    # class sizes 1..12: includes lone labels, which both exclude
    x, y = clustered(120, (1, 12), 32, 1.2, seed=seed)
    ours, ctx = evaluate(x, y, specs=[("recall", 1), ("map_r", None), ("r_precision", None)])
    theirs = _pml(x, y)
    assert ctx.excluded_queries > 0
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, abs=1e-12), key


def test_equal_to_pml_avg_of_avgs():
    x, y = clustered(60, (2, 10), 16, 1.2, seed=4)
    ctx = EvalContext(x, y)
    ours = run_evaluators([RetrievalEvaluator([("map_r", None), ("r_precision", None), ("recall", 1)],
                                              average="classes")], ctx)
    theirs = _pml(x, y, avg_of_avgs=True)
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, abs=1e-12), key


def test_query_gallery_equal_to_pml_with_separate_reference():
    x, y = clustered(50, (4, 10), 16, 1.2, seed=6)
    q = np.zeros(len(x), dtype=bool)
    q[::3] = True
    ours, ctx = evaluate(x, y, specs=[("recall", 1), ("map_r", None), ("r_precision", None)],
                         query_mask=q, gallery_mask=~q)
    calc = AccuracyCalculator(include=tuple(PML), k="max_bin_count", device=torch.device("cpu"))
    theirs = calc.get_accuracy(torch.from_numpy(x[q]), torch.from_numpy(y[q]), torch.from_numpy(x[~q]),
                               torch.from_numpy(y[~q]), ref_includes_query=False)
    for key, value in theirs.items():
        assert ours[PML[key]] == pytest.approx(value, abs=1e-12), key


def test_all_metrics_equal_brute_force_with_duplicates_lone_labels_and_big_ids():
    x, y = clustered(40, (1, 9), 8, 1.0, seed=8, label_offset=2**40)  # ids far above 2**24
    x = np.concatenate([x, x[:25]])  # exact duplicates (same label)
    y = np.concatenate([y, y[:25]])
    y = np.concatenate([y[:-1], [2**40 + 10_000]])  # a lone label
    got, ctx = evaluate(x, y)
    keep = ctx.knn_queries
    ranked = brute_knn(x, x, np.arange(len(x)))
    labels = [y[row[row >= 0]] for row in ranked[keep]]
    want = brute_retrieval(labels, y[keep], ctx.relevant[keep])
    assert got["excluded_queries"] == len(y) - len(keep) >= 1
    for ours, ref in [("recall@1", "recall@1"), ("recall@2", "recall@2"), ("map@r", "map@r"),
                      ("r_precision", "r_precision"), ("map@1000", "map@all"),
                      ("map@1000_revisiting", "map@all_rev"), ("map@c", "map@c"),
                      ("map@c_revisiting", "map@c_rev")]:
        assert got[ours] == pytest.approx(want[ref], abs=1e-12), ours


def test_labels_above_2_pow_24_do_not_collide():
    # 2**24 and 2**24 + 1 are the same number in float32: PML's float labels would merge these classes.
    x = np.array([[0.0], [0.1], [1.0], [1.1]], dtype=np.float32)
    y = np.array([2**24, 2**24 + 1, 2**24, 2**24 + 1], dtype=np.int64)
    m, _ = evaluate(x, y, specs=[("recall", 1), ("map_r", None)])
    assert m["recall@1"] == 0.0 and m["map@r"] == 0.0
    dense = np.array([0, 1, 0, 1])
    assert evaluate(x, dense, specs=[("recall", 1)])[0]["recall@1"] == 0.0


def test_k_larger_than_classes_and_gallery():
    x, y = clustered(5, (2, 3), 4, 0.3, seed=1)
    m, ctx = evaluate(x, y, specs=[("recall", 50), ("map_k", (1000, "standard"))])
    assert m["recall@50"] == 1.0  # every query sees the whole (small) gallery
    assert m["map@1000"] <= 1.0
    assert ctx.knn().shape[1] == len(x)  # capped at the gallery size


def test_all_queries_lone_gives_nan_and_counts_them():
    x = np.eye(4, dtype=np.float32)
    m, _ = evaluate(x, np.arange(4), specs=[("recall", 1), ("map_r", None)])
    assert np.isnan(m["recall@1"]) and np.isnan(m["map@r"])


def test_graph_is_searched_once_with_the_largest_k():
    x, y = clustered(30, (2, 5), 8, 0.8, seed=2)
    ctx = EvalContext(x, y)
    calls = []
    original = ctx._search  # every kNN search (knn() and hits()) goes through it

    def counting(relevance):
        out = original(relevance)
        calls.append(out.shape[1])
        return out

    ctx._search = counting
    run_evaluators([RetrievalEvaluator([("recall", 1)]), RetrievalEvaluator([("recall", 16)], name="r16"),
                    RetrievalEvaluator([("map_r", None)], name="mapr")], ctx)
    assert calls == [16]


def test_per_class_csv(tmp_path):
    x, y = clustered(6, (3, 4), 4, 0.5, seed=0)
    ctx = EvalContext(x, y)
    ev = RetrievalEvaluator([("recall", 1), ("map_r", None)], per_class=True)
    metrics = run_evaluators([ev], ctx)
    (path,) = ev.write_artifacts(ctx, tmp_path)
    rows = path.read_text().strip().splitlines()
    assert rows[0] == "class,queries,recall@1,map@r" and len(rows) == 1 + len(np.unique(y))
    weights = np.array([int(r.split(",")[1]) for r in rows[1:]])
    recall = np.array([float(r.split(",")[2]) for r in rows[1:]])
    assert (weights * recall).sum() / weights.sum() == pytest.approx(metrics["recall@1"], abs=1e-5)
