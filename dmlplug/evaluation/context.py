"""EvalContext: the evaluated embeddings, their labels and everything computed once from them."""

from __future__ import annotations

from typing import Any

import numpy as np

from dmlplug.errors import DataError, RunError
from dmlplug.evaluation.knn import SearchStats, default_budget_bytes, exact_knn, resolve_backend


class EvalContext:
    """Query and gallery embeddings with labels, and a lazily computed, shared kNN graph.

    Without masks every item is a query against all *other* items (leave-one-out). With ``query_mask``
    and ``gallery_mask`` the queries are searched in the gallery; an item in both sets never retrieves
    itself. Queries whose label has no other item in the gallery ("lone" queries) are left out of the
    kNN metrics and counted in :attr:`excluded_queries`.

    Evaluators tell the context how many neighbours they need (:meth:`request_k`) before the first
    :meth:`knn` call, so the graph is searched once with the largest of those values.

    Tensors stay where they are (CPU or GPU): the search runs on their device and only the small neighbour
    lists come to the host, so a GPU run never copies the N×D embeddings to the CPU to search them.

    Args:
        embeddings: ``N×D`` float array (numpy) or tensor (kept on its device); not copied when already
            float32.
        labels: ``N`` integer labels (any int64 values; ids above 2**24 are fine).
        query_mask: Optional boolean mask of length N selecting the queries.
        gallery_mask: Optional boolean mask of length N selecting the gallery.
        backend: kNN backend: ``auto``, ``faiss-cpu``, ``faiss-gpu`` or ``torch``.
        memory_budget_mb: Working memory for distance blocks, pair sets and re-ranking (default 256 MiB).
        seed: Seed for k-means and pair sampling.

    Raises:
        DataError: Shapes, dtypes or masks are inconsistent, or the values are not finite.
    """

    # What evaluators read (docs/plugin-api.md, "What evaluators read"): set by __init__.
    embeddings: Any
    labels: np.ndarray
    leave_one_out: bool
    query_index: np.ndarray
    gallery_index: np.ndarray
    self_pos: np.ndarray
    relevant: np.ndarray
    knn_queries: np.ndarray
    backend: str
    backend_used: str
    memory_budget_mb: float | None
    budget_bytes: int
    seed: int
    cache: dict[Any, Any]
    search_stats: SearchStats | None

    def __init__(
        self,
        embeddings: Any,
        labels: Any,
        *,
        query_mask: Any = None,
        gallery_mask: Any = None,
        backend: str = "auto",
        memory_budget_mb: float | None = None,
        seed: int = 0,
    ):
        self.embeddings, on_cuda = _as_float32_matrix(embeddings)
        self.labels = _as_int64_labels(labels, len(self.embeddings))
        n = len(self.labels)
        if (query_mask is None) != (gallery_mask is None):
            raise DataError("query_mask and gallery_mask must be given together",
                            where="evaluation input", fix="pass both masks, or neither for leave-one-out")
        self.leave_one_out = query_mask is None
        if self.leave_one_out:
            self.query_index = np.arange(n, dtype=np.int64)
            self.gallery_index = self.query_index
        else:
            self.query_index = np.flatnonzero(_as_mask(query_mask, n, "query_mask"))
            self.gallery_index = np.flatnonzero(_as_mask(gallery_mask, n, "gallery_mask"))
            if len(self.query_index) == 0 or len(self.gallery_index) == 0:
                raise DataError("the query set or the gallery set is empty", where="evaluation masks",
                                fix="select at least one query and one gallery item")
        self.backend = backend
        self.backend_used = resolve_backend(backend, on_cuda)
        self.memory_budget_mb = memory_budget_mb
        self.budget_bytes = default_budget_bytes(memory_budget_mb)
        self.seed = int(seed)
        #: Shared results of expensive steps (clusters, pair sets, per-query metric values ...).
        self.cache = {}
        self._knn: np.ndarray | None = None  # canonical neighbours (identities)
        self._rel_knn: np.ndarray | None = None  # canonical up to swaps of equally relevant near-ties
        self._rel_depth = np.zeros(0, dtype=np.int64)
        self._hits: np.ndarray | None = None
        self.search_stats = None
        self._label_stats()

    # ----------------------------------------------------------------------------------------- sets
    @property
    def query_labels(self) -> np.ndarray:
        """int64 labels of the queries."""
        return self.labels[self.query_index]

    @property
    def gallery_labels(self) -> np.ndarray:
        """int64 labels of the gallery."""
        return self.labels[self.gallery_index]

    @property
    def num_queries(self) -> int:
        """Number of queries (lone ones included)."""
        return len(self.query_index)

    @property
    def dim(self) -> int:
        """Embedding dimension D."""
        return int(self.embeddings.shape[1])

    def numpy_embeddings(self, index: np.ndarray | None = None) -> np.ndarray:
        """float32 CPU embeddings, optionally only the rows ``index`` (no copy for all rows in order)."""
        x = self.embeddings
        if not isinstance(x, np.ndarray):
            key = "cpu_embeddings"
            if key not in self.cache:
                self.cache[key] = x.detach().cpu().numpy()
            x = self.cache[key]
        if index is None or (len(index) == len(x) and self.leave_one_out):
            return x
        return x[index]

    def _rows(self, index: np.ndarray) -> Any:
        if len(index) and index[-1] - index[0] + 1 == len(index):
            return self.embeddings[int(index[0]):int(index[-1]) + 1]  # a block of rows: a view, no copy
        if isinstance(self.embeddings, np.ndarray):
            return np.ascontiguousarray(self.embeddings[index])
        import torch

        return self.embeddings[torch.as_tensor(index, device=self.embeddings.device)].contiguous()

    # --------------------------------------------------------------------------------- label stats
    def _label_stats(self) -> None:
        gallery_labels = self.gallery_labels
        classes, counts = np.unique(gallery_labels, return_counts=True)
        q_labels = self.query_labels
        pos = np.searchsorted(classes, q_labels)
        pos_c = np.minimum(pos, max(len(classes) - 1, 0))
        present = (pos < len(classes)) & (classes[pos_c] == q_labels) if len(classes) else np.zeros(
            len(q_labels), bool)
        in_gallery = np.full(len(self.labels), -1, dtype=np.int64)
        in_gallery[self.gallery_index] = np.arange(len(self.gallery_index))
        #: Gallery position of each query itself, -1 when the query is not in the gallery.
        self.self_pos = in_gallery[self.query_index]
        relevant = np.where(present, counts[pos_c], 0) - (self.self_pos >= 0)
        #: Number of relevant gallery items R_q for every query (self excluded).
        self.relevant = relevant.astype(np.int64)
        #: Queries that take part in kNN metrics (their class has another gallery member).
        self.knn_queries = np.flatnonzero(self.relevant > 0)
        self._depth = np.zeros(len(self.knn_queries), dtype=np.int64)
        self._knn_depth = self._depth.copy()
        self._rel_depth = self._depth.copy()

    @property
    def excluded_queries(self) -> int:
        """Number of lone queries (no other item of their class in the gallery) left out of kNN metrics."""
        return int(self.num_queries - len(self.knn_queries))

    @property
    def max_relevant(self) -> int:
        """Largest R_q over the kept queries (the k MAP@R and R-precision need)."""
        return int(self.relevant[self.knn_queries].max()) if len(self.knn_queries) else 0

    # ------------------------------------------------------------------------------------------ kNN
    @property
    def max_neighbours(self) -> int:
        """Most neighbours any query can have."""
        return int(len(self.gallery_index))

    def request_k(self, k: Any) -> None:
        """Declare neighbours an evaluator will need (call before the first :meth:`knn`).

        Args:
            k: An int for every kept query, or one int per kept query (rows of :attr:`knn_queries`), e.g.
                ``R_q`` for MAP@R: only that many leading neighbours of each query must be exact.
        """
        k = np.minimum(np.broadcast_to(np.asarray(k, dtype=np.int64), self._depth.shape), self.max_neighbours)
        self._depth = np.maximum(self._depth, k)

    @property
    def knn_used(self) -> bool:
        """Whether the kNN graph has been computed (by :meth:`knn` or :meth:`hits`)."""
        return self._knn is not None or self._rel_knn is not None

    @property
    def knn_depth(self) -> np.ndarray:
        """Per kept query, how many leading columns of the latest search (:meth:`knn`, :meth:`hits`) are exact."""
        return self._knn_depth if self._knn is not None else self._rel_depth

    def knn(self, k: int | None = None) -> np.ndarray:
        """Neighbour gallery positions of the kept queries (rows follow :attr:`knn_queries`).

        The first ``knn_depth[row]`` columns of a row are the exact canonical neighbours (by float64
        distance, ties by gallery position), identical for every backend; that depth is at least ``k`` and
        at least what was requested with :meth:`request_k`. Later columns follow the backend's order.

        Args:
            k: Columns needed exactly for every query; the graph is recomputed only when it holds fewer.

        Returns:
            ``len(knn_queries) × K`` int64 gallery positions, ``-1`` where a query has fewer than K
            neighbours.
        """
        self.request_k(max(int(k or 0), 1))
        if self._knn is None or bool((self._depth > self._knn_depth).any()):
            self._knn = self._search(relevance=None)
            self._knn_depth = self._depth.copy()
            self._hits = None
        return self._knn

    def _search(self, relevance: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
        gallery = self._rows(self.gallery_index)
        # Leave-one-out with every query kept searches the gallery in itself: one object, so the search can
        # tell (their row norms are computed once).
        queries = self._rows(self.query_index[self.knn_queries]) if self.excluded_queries or \
            not self.leave_one_out else gallery
        width = int(self._depth.max()) if len(self._depth) else 1
        found, self.search_stats = exact_knn(
            queries, gallery, width, self_pos=self.self_pos[self.knn_queries], depth=self._depth,
            backend=self.backend_used, budget_bytes=self.budget_bytes, relevance=relevance,
        )
        return found

    def hits(self, k: int | None = None) -> np.ndarray:
        """Boolean relevance of the neighbours of the kept queries (same shape as :meth:`knn`).

        The first ``knn_depth[row]`` columns equal the relevance of the canonical neighbours of :meth:`knn`.
        Without an earlier :meth:`knn` call they come from a cheaper search that re-ranks only near-ties
        mixing relevant and irrelevant items (their order is all a relevance-based metric sees).
        """
        self.request_k(max(int(k or 0), 1))
        if self._knn is not None and not bool((self._depth > self._knn_depth).any()):
            idx = self._knn
        else:
            if self._rel_knn is None or bool((self._depth > self._rel_depth).any()):
                labels = (self.query_labels[self.knn_queries], self.gallery_labels)  # rows: searched queries
                self._rel_knn = self._search(relevance=labels)
                self._rel_depth = self._depth.copy()
                self._hits = None
            idx = self._rel_knn
        if self._hits is None or self._hits.shape != idx.shape:
            g_labels = self.gallery_labels
            q_labels = self.query_labels[self.knn_queries]
            self._hits = (idx >= 0) & (g_labels[np.maximum(idx, 0)] == q_labels[:, None])
        return self._hits

    def per_class_mean(self, values: np.ndarray, rows: np.ndarray | None = None) -> dict[int, float]:
        """Average per-query ``values`` by query class (``rows`` index the queries; kNN queries by default)."""
        rows = self.knn_queries if rows is None else rows
        labels = self.query_labels[rows]
        classes, inverse = np.unique(labels, return_inverse=True)
        sums = np.bincount(inverse, weights=values, minlength=len(classes))
        counts = np.bincount(inverse, minlength=len(classes))
        return {int(c): float(s / n) for c, s, n in zip(classes, sums, counts, strict=False)}


def _as_float32_matrix(embeddings: Any) -> tuple[Any, bool]:
    if hasattr(embeddings, "detach") and hasattr(embeddings, "device"):  # a torch tensor: stays on its device
        return _as_float32_tensor(embeddings.detach())
    x = embeddings
    try:
        x = np.asarray(x)
    except Exception as exc:  # pragma: no cover - exotic input types
        raise DataError(f"embeddings cannot be read as an array: {exc}", where="evaluation input") from None
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise DataError(f"embeddings must be a non-empty 2-D N×D array, got shape {x.shape}",
                        where="evaluation input", fix="pass one embedding per row")
    if not np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.complexfloating):
        raise DataError(f"embeddings must be real numbers, got dtype {x.dtype}", where="evaluation input")
    x = np.ascontiguousarray(x, dtype=np.float32)
    # A NaN or an infinity always makes the sum non-finite; only then (or when the sum overflows) is every value
    # checked, which spares a full-size boolean array on every evaluation.
    with np.errstate(over="ignore", invalid="ignore"):
        total = x.sum()
    if not np.isfinite(total) and not np.isfinite(x).all():
        raise RunError("the embeddings contain NaN or infinite values", where="evaluation input",
                       fix="check the model for a numerical failure (learning rate, loss scale)")
    return x, False


def _as_float32_tensor(x: Any) -> tuple[Any, bool]:
    """A contiguous float32 tensor on the device it came from (CPU tensors take the same path as CUDA ones)."""
    import torch

    if x.dim() != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise DataError(f"embeddings must be a non-empty 2-D N×D array, got shape {tuple(x.shape)}",
                        where="evaluation input", fix="pass one embedding per row")
    if x.is_complex() or x.dtype == torch.bool:
        raise DataError(f"embeddings must be real numbers, got dtype {x.dtype}", where="evaluation input")
    x = x.float().contiguous()  # free for float32; bfloat16/half outputs are widened
    if not bool(torch.isfinite(x).all()):
        raise RunError("the embeddings contain NaN or infinite values", where="evaluation input",
                       fix="check the model for a numerical failure (learning rate, loss scale)")
    return x, x.device.type == "cuda"


def _as_int64_labels(labels: Any, n: int) -> np.ndarray:
    if hasattr(labels, "detach"):
        labels = labels.detach().cpu().numpy()
    y = np.asarray(labels)
    if y.ndim != 1 or len(y) != n:
        raise DataError(f"labels must be a 1-D array with one label per embedding ({n}), got shape {y.shape}",
                        where="evaluation input", fix="pass N integer labels for N embeddings")
    if y.dtype.kind == "f":
        if not np.all(np.isfinite(y)) or not np.all(y == np.round(y)):
            raise DataError("labels must be integers", where="evaluation input")
        if np.abs(y).max(initial=0) >= 2**53:
            raise DataError("float labels above 2**53 are ambiguous", where="evaluation input",
                            fix="pass labels as int64")
    elif y.dtype.kind not in "iub":
        raise DataError(f"labels must be integers, got dtype {y.dtype}", where="evaluation input")
    return y.astype(np.int64)


def _as_mask(mask: Any, n: int, name: str) -> np.ndarray:
    if hasattr(mask, "detach"):
        mask = mask.detach().cpu().numpy()
    m = np.asarray(mask)
    if m.shape != (n,) or m.dtype != bool:
        raise DataError(f"{name} must be a boolean array of length {n}, got dtype {m.dtype} shape {m.shape}",
                        where="evaluation input", fix=f"pass {name} as N booleans")
    return m
