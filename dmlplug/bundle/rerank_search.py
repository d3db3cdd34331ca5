"""``dmlplug search --rerank``: a re-ranker (αQE, DBA, k-reciprocal … docs/reranking.md) over an index's results.

The re-ranker works on an :class:`IndexProblem`: the index's own search, and exact searches of the index's live
items. Re-rankers need the gallery's float32 vectors (the neighbours' vectors for αQE, the whole gallery for DBA,
the candidates' pairwise distances for k-reciprocal). An exact float32 index holds them; IVF-flat and HNSW-flat
indexes store them uncompressed too and give them back through faiss. An index of compressed codes does not, and
is refused with a message naming the indexes that re-rank.

Re-ranking changes which items come first; the similarity reported with each match (and the accept/reject
verdict at the calibrated threshold) stays the cosine similarity of the query and that item.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dmlplug.bundle.errors import BundleError
from dmlplug.evaluation.rerank_spec import RerankSpec

#: The indexes that keep float32 vectors, for messages.
RERANKABLE = "--codec float32 (the default), ivf, hnsw or binary (its default rescore_from=disk)"


def check_rerankable(index: Any, spec: RerankSpec) -> None:
    """Refuse (cheaply, before any query is embedded) an index that keeps no float32 vectors to re-rank with.

    Raises:
        BundleError: The index's codec keeps only compressed codes (``keeps_floats`` is false).
    """
    if not getattr(index, "keeps_floats", False):
        where = str(getattr(index, "folder", None) or "the index")
        raise BundleError(
            f"--rerank {spec.name} needs the gallery's float32 vectors, and this index (codec "
            f"{getattr(index, 'codec', '?')}) keeps only compressed codes", where=where,
            fix=f"search without --rerank, or rebuild the index as one that re-ranks: {RERANKABLE}")


def gallery_vectors(index: Any, spec: RerankSpec) -> np.ndarray:
    """The float32 vectors of ``index`` by label (``L×D``; rows of removed items are zero and never returned).

    Raises:
        BundleError: The index keeps no float32 vectors (its codec's ``keeps_floats`` is false).
    """
    check_rerankable(index, spec)
    live = np.array([label for label, path in enumerate(index.paths) if path is not None], dtype=np.int64)
    gallery = np.zeros((len(index.paths), int(index.dim)), dtype=np.float32)
    if len(live):
        gallery[live] = index.reconstruct(live)
    return gallery


class IndexProblem:
    """The :class:`~dmlplug.protocols.RerankProblem` of an index search; only the items the index holds take part.

    Rows are the index's labels; those of removed items are zero rows of :attr:`gallery`, never returned.

    Args:
        index: The index (its ``search`` and ``paths``; a removed item's path is ``None``).
        queries: ``Q×D`` unit queries.
        gallery: ``L×D`` float32 vectors by label (:func:`gallery_vectors`).
        budget_bytes: Working-memory budget.
    """

    depth = None  # the caller reads every returned neighbour

    def __init__(self, index: Any, queries: np.ndarray, gallery: np.ndarray, budget_bytes: int):
        self.index, self.queries, self.gallery, self.budget_bytes = index, queries, gallery, budget_bytes
        self.live = np.array([label for label, path in enumerate(index.paths) if path is not None], dtype=np.int64)

    def search(self, queries: Any, k: int, depth: Any = None) -> np.ndarray:
        """``Q×k`` labels by the index's own search (approximate for an IVF/HNSW index), ``-1`` slots last."""
        _, rows = self.index.search(queries, k)
        return _missing_last(rows)

    def search_in(self, gallery: Any, queries: Any, k: int, depth: Any = None) -> np.ndarray:
        """``Q×k`` labels by an exact search of the live rows of a replacement gallery."""
        from dmlplug.evaluation.knn import exact_knn, resolve_backend

        found, _ = exact_knn(queries, np.ascontiguousarray(gallery[self.live]), k,
                             self_pos=np.full(len(queries), -1, dtype=np.int64), backend=resolve_backend("auto", False),
                             budget_bytes=self.budget_bytes)
        return self._labels(found)

    def gallery_neighbours(self, n: int) -> np.ndarray:
        """``L×n``: each live item's ``n`` nearest other live items (``-1`` rows for removed items)."""
        from dmlplug.evaluation.rerank_problem import gallery_knn

        rows = np.full((len(self.gallery), n), -1, dtype=np.int64)
        rows[self.live] = self._labels(gallery_knn(self.gallery[self.live], n, budget_bytes=self.budget_bytes))
        return rows

    def _labels(self, found: np.ndarray) -> np.ndarray:
        """Positions among the live rows as labels (``-1`` stays)."""
        found = np.asarray(found, dtype=np.int64)
        return np.where(found >= 0, self.live[np.maximum(found, 0)], -1)


def reranked_search(index: Any, queries: np.ndarray, k: int, spec: RerankSpec,
                    budget_bytes: int = 256 << 20) -> tuple[np.ndarray, np.ndarray]:
    """``(similarities Q×k, rows Q×k)`` of ``index`` after re-ranking with ``spec``; ``-1`` rows mark no match.

    The re-ranker searches through an :class:`IndexProblem`. Similarities are the cosine of the query and each
    returned item.

    Raises:
        BundleError: The index keeps no float32 vectors.
    """
    from dmlplug.evaluation.rerank_problem import normalise

    gallery = gallery_vectors(index, spec)
    q = normalise(queries)
    problem = IndexProblem(index, q, gallery, budget_bytes)
    rows = np.asarray(spec.build().rerank(problem, min(k, len(gallery))), dtype=np.int64)
    sims = np.einsum("qd,qkd->qk", q, gallery[np.maximum(rows, 0)])
    return np.where(rows >= 0, sims, -np.inf).astype(np.float32), rows


def _missing_last(rows: np.ndarray) -> np.ndarray:
    """Each row's ``-1`` entries (slots an approximate index could not fill) moved to its end, order kept."""
    rows = np.asarray(rows, dtype=np.int64)
    order = np.argsort(rows < 0, axis=1, kind="stable")
    return np.take_along_axis(rows, order, axis=1)
