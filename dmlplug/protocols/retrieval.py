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

    Rows of :attr:`gallery` are what every search returns; ``-1`` marks a missing neighbour, after every found one.

    Attributes:
        queries: ``Q×D`` float32 unit vectors.
        gallery: ``G×D`` float32 unit vectors (an index's removed items are zero rows that no search returns).
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
        """``G×n`` rows: each gallery item's ``n`` nearest other gallery items by cosine (exact, canonical order)."""


@runtime_checkable
class Reranker(Protocol):
    """A re-ranking method (``[evaluation] rerank = ["aqe"]``, ``dmlplug search --rerank aqe:n=3``)."""

    def rerank(self, problem: RerankProblem, k: int) -> Any:
        """``Q×k`` int64 gallery rows, best first (``-1``: none): the re-ranked neighbours of every query."""


@runtime_checkable
class IndexCodec(Protocol):
    """How ``dmlplug index --codec NAME`` stores and searches a gallery (float32, int8, pq, hnsw …).

    The codec is built from its ``Params`` (what a user may set; ``None``: derived by :meth:`plan`). Its index has
    faiss's interface: ``d``, ``ntotal``, ``is_trained``, ``train(x)``, ``add_with_ids(x, labels)``,
    ``remove_ids(labels)`` and ``search(queries, k) -> (similarities, labels)`` by inner product (``-1``: a slot
    it could not fill). Labels are gallery rows. dmlplug trains it on a sample, adds the gallery chunk by chunk,
    measures its recall against exact search, writes it with ``index.json`` and checks its files when it reads it.

    Attributes:
        exact: Whether it is the exact search of the float32 vectors: dmlplug then builds with :meth:`new_index`
            and takes the vectors back with :meth:`reconstruct` to keep them itself (searched without faiss too,
            written as ``index.faiss`` or ``embeddings.pt``); :meth:`sizes`, :meth:`save` and :meth:`load` are not
            called.
        removable: Whether its index can remove items (``dmlplug index-remove``).
        keeps_floats: Whether its index gives back every item's float32 vector (:meth:`reconstruct`;
            ``dmlplug search --rerank`` needs them).
    """

    exact: bool
    removable: bool
    keeps_floats: bool

    def plan(self, n: int, dim: int, k: int) -> dict[str, Any]:
        """Every parameter of an index of ``n`` ``dim``-d vectors searched for ``k`` neighbours.

        Those the Params give, the others derived; JSON values, recorded in ``index.json`` (a folder is read back
        with the Params its keys name). ``dmlplug index`` asks it once with ``n = 1`` before it embeds anything, so
        that a parameter impossible for ``dim`` is refused first.

        Raises:
            DmlplugError: A parameter is impossible for ``dim`` (a sub-vector count that does not divide it).
        """

    def budget_plans(self, n: int, dim: int, k: int) -> list[dict[str, Any]]:
        """The plans ``--budget`` tries, finest first (the first one that fits is kept); empty: not a candidate."""

    def bytes_floor(self, dim: int, plan: dict[str, Any]) -> float:
        """The least a vector of a ``plan`` index takes in memory (its code and its id), known before it is built.

        ``--budget`` builds no plan whose floor exceeds the budget.
        """

    def training_rows(self, n: int, plan: dict[str, Any]) -> int:
        """How many of ``n`` gallery vectors train the index (0: it needs no training)."""

    def new_index(self, dim: int, plan: dict[str, Any]) -> Any:
        """An empty index of ``plan``, its search parameters set."""

    def reconstruct(self, index: Any, labels: Any) -> Any:
        """``L×d`` float32 vectors of the ``labels`` (asked only when :attr:`keeps_floats`)."""

    def sizes(self, index: Any) -> tuple[int, int]:
        """``(bytes in memory, bytes on disk)`` of the index's data once loaded and once saved.

        They differ when the index keeps part of its data in files it reads through a memory map.
        """

    def save(self, index: Any, folder: Path) -> list[str]:
        """Write ``index`` into ``folder``; returns the names of the files written (``index.json`` records them)."""

    def load(self, folder: Path, plan: dict[str, Any]) -> Any:
        """The index :meth:`save` wrote into ``folder``, with ``plan``'s search parameters set.

        ``plan`` is what ``index.json`` records, possibly written by an older dmlplug.

        Raises:
            ValueError: The files hold another kind of index, or are damaged; the message says what they hold
                (``"a IndexFlatIP of 24 8-d vectors"``).
            RuntimeError: faiss cannot read a file (truncated, not an index).
        """
