"""Which queries a retrieval picture shows, and their top-k neighbours with similarities.

Two selections of the kept (non-lone) queries of an :class:`~dmlplug.evaluation.EvalContext`:

* :func:`worst_queries`: the lowest average precision first (ties by query order), so the grid shows
  where the model fails most;
* :func:`sample_queries`: a fixed random sample drawn from a seed, the same at every evaluation of a run
  (the kept queries depend on the labels only), so a user can watch the same queries improve.

The neighbours come from :func:`dmlplug.evaluation.knn.exact_knn` run on the chosen queries only (a few
dozen rows against the gallery): the same canonical order as the evaluation's kNN graph, without searching
every query again when the evaluators only needed the cheaper relevance search. Numpy only; torch is used
only when the embeddings are tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dmlplug.evaluation.context import EvalContext

#: Per-query average-precision metrics, in order of preference, as the retrieval evaluators cache them.
AP_SPECS: tuple[tuple[str, Any], ...] = (("map_r", None), ("map_c", "standard"), ("map_c", "revisiting"))


@dataclass
class RetrievedRow:
    """One query and its top-k neighbours, as indices into the evaluated split.

    Attributes:
        query: Item index of the query in the split.
        label: The query's label.
        ap: The query's average precision (the metric named by :func:`query_average_precision`).
        neighbours: Item indices of the neighbours, nearest first (fewer than k when the gallery is small).
        labels: Label of each neighbour.
        similarities: Cosine similarity of each neighbour to the query.
        correct: Whether each neighbour has the query's label.
    """

    query: int
    label: int
    ap: float
    neighbours: list[int]
    labels: list[int]
    similarities: list[float]
    correct: list[bool]


def query_average_precision(eval_context: EvalContext) -> tuple[str, np.ndarray]:
    """Average precision of every kept query (rows follow ``eval_context.knn_queries``) and the metric's name.

    The per-query values an evaluator already computed (cached in ``eval_context.cache``) are reused, MAP@R first;
    without any, MAP@R is computed (one relevance search of the kept queries).
    """
    from dmlplug.evaluation.retrieval import per_query_metrics, spec_key

    cached = [spec for spec in AP_SPECS if ("per_query", spec) in eval_context.cache]
    spec = cached[0] if cached else AP_SPECS[0]
    return spec_key(spec), per_query_metrics(eval_context, [spec])[spec_key(spec)]


def worst_queries(ap: np.ndarray, count: int) -> np.ndarray:
    """Rows of the ``count`` lowest values of ``ap``, lowest first; ties keep row order (NaN counts as worst)."""
    values = np.nan_to_num(np.asarray(ap, dtype=np.float64), nan=-np.inf)
    return np.argsort(values, kind="stable")[: max(0, int(count))].astype(np.int64)


def sample_queries(num_rows: int, count: int, seed: int) -> np.ndarray:
    """``count`` distinct rows of ``range(num_rows)`` drawn with ``seed``, ascending (the same for the same seed)."""
    rng = np.random.default_rng(int(seed))
    chosen = rng.choice(int(num_rows), size=min(int(count), int(num_rows)), replace=False)
    return np.sort(chosen).astype(np.int64)


def retrieve_rows(eval_context: EvalContext, rows: np.ndarray, k: int, ap: np.ndarray) -> list[RetrievedRow]:
    """The top-``k`` neighbours of the kept queries at ``rows`` (rows of ``eval_context.knn_queries``).

    Args:
        eval_context: The evaluation context.
        rows: Rows of ``eval_context.knn_queries``.
        k: Neighbours per query (capped at the gallery size).
        ap: Average precision of every kept query (from :func:`query_average_precision`).

    Returns:
        One :class:`RetrievedRow` per row, in the order of ``rows``.
    """
    from dmlplug.evaluation.knn import exact_knn

    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) == 0:
        return []
    positions = eval_context.knn_queries[rows]  # query positions
    items = eval_context.query_index[positions]  # item indices in the split
    k = max(1, min(int(k), eval_context.max_neighbours))
    # Leave-one-out: the gallery is every row, searched in place (no copy of the N×D matrix).
    embeddings = eval_context.embeddings
    gallery = embeddings if eval_context.leave_one_out else _take(embeddings, eval_context.gallery_index)
    found, _ = exact_knn(_take(embeddings, items), gallery, k, self_pos=eval_context.self_pos[positions],
                         backend=eval_context.backend_used, budget_bytes=eval_context.budget_bytes)
    query_vectors = _numpy(_take(eval_context.embeddings, items)).astype(np.float64)
    result: list[RetrievedRow] = []
    for row, item, neighbours in zip(rows, items, found, strict=True):
        neighbours = neighbours[neighbours >= 0]
        neighbour_items = eval_context.gallery_index[neighbours]
        vectors = _numpy(_take(eval_context.embeddings, neighbour_items)).astype(np.float64)
        query = query_vectors[len(result)]
        norms = np.linalg.norm(vectors, axis=1) * np.linalg.norm(query)
        similarities = vectors @ query / np.where(norms > 0, norms, 1.0)
        label, labels = int(eval_context.labels[item]), eval_context.labels[neighbour_items]
        result.append(RetrievedRow(
            query=int(item), label=label, ap=float(ap[row]), neighbours=[int(i) for i in neighbour_items],
            labels=[int(y) for y in labels], similarities=[float(s) for s in similarities],
            correct=[bool(c) for c in labels == label]))
    return result


def _take(embeddings: Any, index: np.ndarray) -> Any:
    """Rows ``index`` of a numpy array or a tensor, kept where they are (a GPU tensor stays on the GPU)."""
    index = np.asarray(index, dtype=np.int64)
    if isinstance(embeddings, np.ndarray):
        return np.ascontiguousarray(embeddings[index])
    import torch

    return embeddings[torch.as_tensor(index, device=embeddings.device)].contiguous()


def _numpy(x: Any) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else x.detach().cpu().numpy()
