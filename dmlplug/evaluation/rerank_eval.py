"""Re-ranked evaluation: the kNN metrics computed again over a re-ranked neighbour list.

:class:`RerankedContext` is an :class:`~dmlplug.evaluation.EvalContext` whose neighbour search applies one
re-ranking method (:mod:`dmlplug.evaluation.reranking`) to the same queries and gallery: αQE searches with the
expanded queries, DBA searches the augmented gallery, k-reciprocal re-orders the first ``shortlist`` exact
neighbours. Everything else (lone queries, self-exclusion, the metric code of every kNN evaluator) is the base
context's, so ``recall@1+aqe`` and ``recall@1`` are computed by the same code over two neighbour lists.

The methods run on the L2-normalised embeddings, on the CPU (the neighbour lists and the ``N×D`` matrix only).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from dmlplug.evaluation.context import EvalContext
from dmlplug.evaluation.knn import exact_knn, resolve_backend
from dmlplug.evaluation.rerank_spec import RerankSpec
from dmlplug.evaluation.reranking import augment_gallery, expand_queries, k_reciprocal, normalise
from dmlplug.evaluation.runner import EXCLUDED_KEY, run_evaluators
from dmlplug.protocols import HasRequiredK


class RerankedContext(EvalContext):
    """The queries and gallery of ``base``, with neighbours found by a re-ranking method.

    The first ``knn_depth[row]`` columns of :meth:`knn` are the re-ranked result: for αQE and DBA the canonical
    exact neighbours of the expanded query / in the augmented gallery; for k-reciprocal the re-ordered
    shortlist followed, beyond it, by the exact neighbours in their canonical order.

    Args:
        base: The evaluated context (its embeddings, labels, masks, budget and seed are reused).
        spec: The re-ranking method.
    """

    def __init__(self, base: EvalContext, spec: RerankSpec):
        masks: dict[str, Any] = {}
        if not base.leave_one_out:
            n = len(base.labels)
            masks = {"query_mask": np.isin(np.arange(n), base.query_index),
                     "gallery_mask": np.isin(np.arange(n), base.gallery_index)}
        super().__init__(base.numpy_embeddings(), base.labels, backend="auto", memory_budget_mb=base.memory_budget_mb,
                         seed=base.seed, **masks)
        self.spec = spec
        self._cpu_backend = resolve_backend("auto", False)

    def _search(self, relevance: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
        # relevance is not used: the re-ranked list is computed in full (its order is the method's result).
        emb = self.cache.get("unit_embeddings")
        if emb is None:
            emb = self.cache["unit_embeddings"] = normalise(self.numpy_embeddings())
        queries = np.ascontiguousarray(emb[self.query_index[self.knn_queries]])
        gallery = np.ascontiguousarray(emb[self.gallery_index])
        self_pos = self.self_pos[self.knn_queries]
        depth = self._depth
        width = int(depth.max()) if len(depth) else 1
        p, budget = self.spec.params, self.budget_bytes

        def search(q: np.ndarray, g: np.ndarray, k: int, d: np.ndarray | None = None) -> np.ndarray:
            found, self.search_stats = exact_knn(q, g, k, self_pos=self_pos, depth=d, backend=self._cpu_backend,
                                                 budget_bytes=budget)
            return found

        if self.spec.name == "aqe":
            neighbours = search(queries, gallery, int(p["n"]))
            expanded = expand_queries(queries, gallery, neighbours, alpha=float(p["alpha"]), budget_bytes=budget)
            return search(expanded, gallery, width, depth)
        if self.spec.name == "dba":
            augmented = augment_gallery(gallery, n=int(p["n"]), alpha=float(p["alpha"]), backend=self._cpu_backend,
                                        budget_bytes=budget)
            return search(queries, augmented, width, depth)
        shortlist = min(int(p["shortlist"]), self.max_neighbours)
        found = search(queries, gallery, max(width, shortlist), np.maximum(depth, shortlist))
        found[:, :shortlist] = k_reciprocal(queries, gallery, found[:, :shortlist], k1=int(p["k1"]), k2=int(p["k2"]),
                                            lam=float(p["lambda"]), budget_bytes=budget)
        return found


def rerank_metrics(evaluators: Iterable[Any], base: EvalContext, specs: Sequence[RerankSpec]) -> dict[str, float]:
    """The kNN evaluators' metrics after each re-ranking method, keyed ``<metric>+<label>``.

    Only evaluators with ``required_k`` (the kNN metrics) are run again: clustering and pair metrics do not
    depend on a neighbour list. ``excluded_queries`` is not repeated (the lone queries are the same).

    Args:
        evaluators: The built evaluators of the evaluation.
        base: The context the plain metrics were computed on.
        specs: The re-ranking methods (``[evaluation] rerank``).
    """
    knn_evaluators = [e for e in evaluators if isinstance(e, HasRequiredK)]
    metrics: dict[str, float] = {}
    if not knn_evaluators or not len(base.knn_queries):
        return metrics
    for spec in specs:
        values = run_evaluators(knn_evaluators, RerankedContext(base, spec))
        values.pop(EXCLUDED_KEY, None)
        metrics.update({f"{key}+{spec.label}": value for key, value in values.items()})
    return metrics
