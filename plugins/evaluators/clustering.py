"""Clustering metrics: k-means with K = number of classes, then NMI, AMI and pair-counting F1.

The clustered set is the query set (the whole set in leave-one-out mode), with K = its number of classes
(not the number of training classes, see docs/methods/revisiting.md). The cluster assignment is computed once per
context and shared by ``nmi``, ``ami`` and ``f1``.
"""

from __future__ import annotations

import numpy as np

from dmlplug.evaluation import EvalContext


def kmeans_assignments(eval_context: EvalContext, iterations: int = 20) -> np.ndarray:
    """Cluster index of every query (cached in ``eval_context``); faiss k-means, scikit-learn when faiss is absent.

    faiss runs ``iterations`` Lloyd steps from a seeded random initialisation, with
    ``min_points_per_centroid = 1`` and no subsampling, as the reference DML codes do.
    """
    key = ("kmeans", iterations)
    if key in eval_context.cache:
        return eval_context.cache[key]
    x = eval_context.numpy_embeddings(eval_context.query_index)
    num_clusters = len(np.unique(eval_context.query_labels))
    if num_clusters <= 1:
        assignment = np.zeros(len(x), dtype=np.int64)
    else:
        try:
            import faiss
        except ImportError:  # optional: scikit-learn's k-means below
            faiss = None  # type: ignore[assignment]  # None marks faiss as absent (mypy types the name a module)
        if faiss is not None:
            km = faiss.Kmeans(x.shape[1], num_clusters, niter=iterations, seed=eval_context.seed,
                              min_points_per_centroid=1, max_points_per_centroid=max(256, len(x)),
                              verbose=False)
            km.train(np.ascontiguousarray(x))
            _, assign = km.index.search(np.ascontiguousarray(x), 1)
            assignment = assign[:, 0].astype(np.int64)
        else:
            from sklearn.cluster import KMeans

            km = KMeans(n_clusters=num_clusters, n_init=1, max_iter=iterations, random_state=eval_context.seed)
            assignment = km.fit_predict(x).astype(np.int64)
    eval_context.cache[key] = assignment
    return assignment


def pair_counting_f1(labels: np.ndarray, clusters: np.ndarray) -> float:
    """F1 of the pairs put together by the clustering (Revisiting ``f1``).

    TP = pairs in the same class and the same cluster; precision = TP / pairs in the same cluster;
    recall = TP / pairs in the same class. Uses label/cluster counts only (no pair enumeration).
    """

    def pairs(counts: np.ndarray) -> float:
        c = counts.astype(np.float64)
        return float((c * (c - 1) / 2).sum())

    _, label_idx = np.unique(labels, return_inverse=True)
    _, cluster_idx = np.unique(clusters, return_inverse=True)
    joint = label_idx.astype(np.int64) * (int(cluster_idx.max()) + 1) + cluster_idx
    tp = pairs(np.unique(joint, return_counts=True)[1])
    same_cluster = pairs(np.bincount(cluster_idx))
    same_class = pairs(np.bincount(label_idx))
    if tp == 0:
        return 0.0
    precision, recall = tp / same_cluster, tp / same_class
    return 2 * precision * recall / (precision + recall)


class ClusteringEvaluator:
    """NMI, AMI and/or F1 of the k-means clustering of the query set.

    Args:
        metrics: Any of ``"nmi"``, ``"ami"``, ``"f1"``.
        iterations: k-means iterations.
        average_method: Normalisation of NMI/AMI in scikit-learn (``arithmetic`` is its default).
    """

    #: The evaluator's name (metric or table name), set by the factory that builds it.
    name: str

    def __init__(self, metrics: list[str], iterations: int = 20, average_method: str = "arithmetic"):
        self.metrics = metrics
        self.iterations = iterations
        self.average_method = average_method

    def evaluate(self, eval_context: EvalContext) -> dict[str, float]:
        """The requested clustering metrics."""
        from sklearn.metrics import adjusted_mutual_info_score, normalized_mutual_info_score

        clusters = kmeans_assignments(eval_context, self.iterations)
        labels = eval_context.query_labels
        out = {}
        for name in self.metrics:
            if name == "nmi":
                out["nmi"] = float(normalized_mutual_info_score(labels, clusters,
                                                                average_method=self.average_method))
            elif name == "ami":
                out["ami"] = float(adjusted_mutual_info_score(labels, clusters,
                                                              average_method=self.average_method))
            elif name == "f1":
                out["f1"] = pair_counting_f1(labels, clusters)
            else:
                raise ValueError(f"unknown clustering metric {name!r}")
        return out
