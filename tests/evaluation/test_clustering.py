import itertools

import numpy as np
import pytest
from eval_helpers import clustered
from sklearn.metrics import normalized_mutual_info_score

from dmlplug.evaluation import EvalContext, run_evaluators
from dmlplug_builtins.evaluators.clustering import ClusteringEvaluator, kmeans_assignments, pair_counting_f1


def test_nmi_and_f1_oracle_methods_7_2():
    labels = np.array([0, 0, 0, 1, 1, 1])
    clusters = np.array([0, 0, 1, 1, 1, 1])
    assert normalized_mutual_info_score(labels, clusters) == pytest.approx(0.47870, abs=1e-5)
    assert pair_counting_f1(labels, clusters) == pytest.approx(0.61538, abs=1e-5)


def test_pair_counting_f1_equals_explicit_pair_enumeration():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, 40) + 2**33
    clusters = rng.integers(0, 6, 40)
    tp = fp = fn = 0
    for i, j in itertools.combinations(range(40), 2):
        same_class, same_cluster = labels[i] == labels[j], clusters[i] == clusters[j]
        tp += same_class and same_cluster
        fp += same_cluster and not same_class
        fn += same_class and not same_cluster
    p, r = tp / (tp + fp), tp / (tp + fn)
    assert pair_counting_f1(labels, clusters) == pytest.approx(2 * p * r / (p + r), abs=1e-12)


def test_separated_clusters_score_one_and_k_is_the_class_count():
    x, y = clustered(6, (10, 15), 16, 0.05, seed=1, label_offset=2**30)
    ctx = EvalContext(x, y)
    metrics = run_evaluators([ClusteringEvaluator(["nmi", "ami", "f1"])], ctx)
    assert metrics == {"nmi": pytest.approx(1.0), "ami": pytest.approx(1.0), "f1": pytest.approx(1.0)}
    assert len(np.unique(kmeans_assignments(ctx))) == 6
    assert "excluded_queries" not in metrics  # no kNN metric was computed


def test_noisy_clusters_match_sklearn_on_the_shared_assignment():
    x, y = clustered(8, (5, 10), 8, 1.5, seed=2)
    ctx = EvalContext(x, y, seed=3)
    m = run_evaluators([ClusteringEvaluator(["nmi"]), ClusteringEvaluator(["f1"])], ctx)
    clusters = kmeans_assignments(ctx)
    assert m["nmi"] == pytest.approx(normalized_mutual_info_score(y, clusters))
    assert m["f1"] == pytest.approx(pair_counting_f1(y, clusters))
    assert 0 < m["nmi"] < 1
