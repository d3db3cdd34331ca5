"""Re-ranked evaluation: the kNN metrics computed again over a re-ranked neighbour list.

:class:`RerankedContext` is an :class:`~dmlplug.evaluation.EvalContext` whose neighbour search is a re-ranker's
(:class:`dmlplug.protocols.Reranker`, e.g. αQE, DBA, k-reciprocal) over the same queries and gallery, which it
reaches through an :class:`ExactProblem`: the exact kNN search with each query left out of its own results.
Everything else (lone queries, self-exclusion, the metric code of every kNN evaluator) is the base context's, so
``recall@1+aqe`` and ``recall@1`` are computed by the same code over two neighbour lists.

Re-rankers run on the L2-normalised embeddings, on the CPU (the neighbour lists and the ``N×D`` matrix only).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from dmlplug.evaluation.context import EvalContext
from dmlplug.evaluation.knn import SearchStats, exact_knn, resolve_backend
from dmlplug.evaluation.rerank_problem import gallery_knn, normalise
from dmlplug.evaluation.rerank_spec import RerankSpec
from dmlplug.evaluation.runner import EXCLUDED_KEY, run_evaluators
from dmlplug.protocols import HasRequiredK, Reranker


class ExactProblem:
    """The :class:`~dmlplug.protocols.RerankProblem` of an evaluation: exact kNN searches on the CPU.

    Args:
        queries: ``Q×D`` unit vectors of the kept queries.
        gallery: ``G×D`` unit vectors.
        self_pos: ``Q``: each query's own gallery row (left out of its results), ``-1`` when it has none.
        depth: ``Q``: the leading neighbours the metrics read (certified canonical by the last search).
        budget_bytes: Working-memory budget.

    Attributes:
        stats: The statistics of the latest search, or ``None`` before the first.
    """

    def __init__(self, queries: np.ndarray, gallery: np.ndarray, self_pos: np.ndarray, depth: np.ndarray,
                 budget_bytes: int):
        self.queries, self.gallery, self.depth, self.budget_bytes = queries, gallery, depth, budget_bytes
        self.self_pos = self_pos
        self.backend = resolve_backend("auto", False)
        self.stats: SearchStats | None = None

    def search(self, queries: Any, k: int, depth: Any = None) -> np.ndarray:
        """``Q×k`` exact neighbours in the gallery, each query's own row left out."""
        return self.search_in(self.gallery, queries, k, depth)

    def search_in(self, gallery: Any, queries: Any, k: int, depth: Any = None) -> np.ndarray:
        """``Q×k`` exact neighbours in a replacement gallery, each query's own row left out."""
        found, self.stats = exact_knn(queries, gallery, k, self_pos=self.self_pos, depth=depth, backend=self.backend,
                                      budget_bytes=self.budget_bytes)
        return found

    def gallery_neighbours(self, n: int) -> np.ndarray:
        """``G×n``: each gallery item's ``n`` nearest other items."""
        return gallery_knn(self.gallery, n, budget_bytes=self.budget_bytes)


class RerankedContext(EvalContext):
    """The queries and gallery of ``base``, with neighbours found by a re-ranker.

    The first ``knn_depth[row]`` columns of :meth:`knn` are the re-ranked result (for αQE and DBA the canonical
    exact neighbours of the expanded query / in the augmented gallery; for k-reciprocal the re-ordered
    shortlist followed, beyond it, by the exact neighbours in their canonical order).

    Args:
        base: The evaluated context (its embeddings, labels, masks, budget and seed are reused).
        reranker: The built re-ranker.
    """

    def __init__(self, base: EvalContext, reranker: Reranker):
        masks: dict[str, Any] = {}
        if not base.leave_one_out:
            n = len(base.labels)
            masks = {"query_mask": np.isin(np.arange(n), base.query_index),
                     "gallery_mask": np.isin(np.arange(n), base.gallery_index)}
        super().__init__(base.numpy_embeddings(), base.labels, backend="auto", memory_budget_mb=base.memory_budget_mb,
                         seed=base.seed, **masks)
        self.reranker = reranker

    def _search(self, relevance: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
        # relevance is not used: the re-ranked list is computed in full (its order is the re-ranker's result).
        emb = self.cache.get("unit_embeddings")
        if emb is None:
            emb = self.cache["unit_embeddings"] = normalise(self.numpy_embeddings())
        problem = ExactProblem(np.ascontiguousarray(emb[self.query_index[self.knn_queries]]),
                               np.ascontiguousarray(emb[self.gallery_index]), self.self_pos[self.knn_queries],
                               self._depth, self.budget_bytes)
        width = int(self._depth.max()) if len(self._depth) else 1
        found = np.asarray(self.reranker.rerank(problem, width), dtype=np.int64)
        if problem.stats is not None:
            self.search_stats = problem.stats
        return found


def rerank_metrics(evaluators: Iterable[Any], base: EvalContext, specs: Sequence[RerankSpec]) -> dict[str, float]:
    """The kNN evaluators' metrics after each re-ranking method, keyed ``<metric>+<label>``.

    Only evaluators with ``required_k`` (the kNN metrics) are run again: clustering and pair metrics do not
    depend on a neighbour list. ``excluded_queries`` is not repeated (the lone queries are the same).

    Args:
        evaluators: The built evaluators of the evaluation.
        base: The context the plain metrics were computed on.
        specs: The re-rankers (``[evaluation] rerank``), validated.
    """
    knn_evaluators = [e for e in evaluators if isinstance(e, HasRequiredK)]
    metrics: dict[str, float] = {}
    if not knn_evaluators or not len(base.knn_queries):
        return metrics
    for spec in specs:
        values = run_evaluators(knn_evaluators, RerankedContext(base, spec.build()))
        values.pop(EXCLUDED_KEY, None)
        metrics.update({f"{key}+{spec.label}": value for key, value in values.items()})
    return metrics
