"""The contract of the retrieval kinds: re-rankers and index codecs.

A re-ranker reorders a search's neighbours (``[evaluation] rerank``, ``dmlplug search --rerank``); it is handed a
:class:`RerankProblem` that dmlplug fills, so the same component re-ranks an evaluation (exact kNN, the query itself
left out) and an index search (the index's own search). An index codec says how ``dmlplug index --codec`` stores and
searches gallery vectors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class RerankProblem(Protocol):
    """What a re-ranker works on, filled by dmlplug (a re-ranker reads it; it never builds one).

    Rows of :attr:`gallery` are what every search returns; ``-1`` marks a missing neighbour.

    Attributes:
        queries: ``Q×D`` float32 unit vectors.
        gallery: ``G×D`` float32 unit vectors.
        depth: ``Q`` ints, or ``None``: how many leading neighbours of each query the caller reads (an evaluation
            certifies only those); pass it on to the last search.
        budget_bytes: Working memory the re-ranker may use for its own arrays.
    """

    queries: Any
    gallery: Any
    depth: Any
    budget_bytes: int

    def search(self, queries: Any, k: int, depth: Any = None) -> Any:
        """``Q×k`` gallery rows of ``queries`` by the caller's search.

        In an evaluation, the exact kNN with each query left out of its own results; in ``dmlplug search``, the
        index's own (possibly approximate) search.
        """

    def search_in(self, gallery: Any, queries: Any, k: int, depth: Any = None) -> Any:
        """``Q×k`` rows of an exact search of ``queries`` in a replacement ``G×D`` gallery.

        Row ``i`` of ``gallery`` stands for gallery row ``i`` (DBA's augmented gallery); the same rows are left
        out as by :meth:`search`.
        """

    def gallery_neighbours(self, n: int) -> Any:
        """``G×n`` rows: each gallery item's ``n`` nearest other gallery items (exact, canonical order)."""


@runtime_checkable
class Reranker(Protocol):
    """A re-ranking method (``[evaluation] rerank = ["aqe"]``, ``dmlplug search --rerank aqe:n=3``)."""

    def rerank(self, problem: RerankProblem, k: int) -> Any:
        """``Q×k`` int64 gallery rows, best first (``-1``: none): the re-ranked neighbours of every query."""


@runtime_checkable
class IndexCodec(Protocol):
    """How ``dmlplug index --codec NAME`` stores and searches a gallery (float32, int8, pq, hnsw …).

    The codec's ``Params`` hold what a user may set (``None``: derived from the gallery by :meth:`plan`).

    Attributes:
        removable: Whether its index can remove items (``dmlplug index-remove``).
        keeps_floats: Whether its index keeps every item's float32 vector (re-ranking needs them).
    """

    removable: bool
    keeps_floats: bool

    def plan(self, n: int, dim: int, k: int) -> dict[str, Any]:
        """Every parameter of an index of ``n`` ``dim``-d vectors searched for ``k`` neighbours.

        Those the Params give, the others derived; JSON values, recorded in ``index.json``.
        """

    def budget_plans(self, n: int, dim: int, k: int, limit: float) -> list[dict[str, Any]]:
        """The plans ``--budget`` tries under ``limit`` bytes per vector, most accurate first.

        Empty when none fits, or when the codec is not a compression ``--budget`` chooses from.
        """

    def bytes_floor(self, dim: int, plan: dict[str, Any]) -> float:
        """The least an index of ``plan`` stores per vector (its code and its id), before it is built."""

    def training_rows(self, n: int, plan: dict[str, Any]) -> int:
        """How many of ``n`` gallery vectors train the index (0: it needs no training)."""

    def new_index(self, dim: int, plan: dict[str, Any]) -> Any:
        """An empty index with faiss's interface.

        ``is_trained``, ``ntotal``, ``train``, ``add_with_ids``, ``remove_ids`` and
        ``search(queries, k) -> (similarities, labels)`` by inner product.
        """

    def save(self, index: Any, path: Path) -> list[Path]:
        """Write ``index`` to ``path`` (and files beside it); returns every file written."""

    def load(self, path: Path, plan: dict[str, Any]) -> Any:
        """The index :meth:`save` wrote to ``path``, with ``plan``'s search parameters set."""
