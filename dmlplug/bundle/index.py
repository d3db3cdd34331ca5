"""Galleries to search: the exact index and the coded ones (compressed or approximate) with their measured recall.

The exact index (codec ``float32``) is a faiss ``IndexFlatIP`` (a torch file of the embeddings when faiss is
missing); the others are the faiss indexes of :mod:`dmlplug.bundle.codecs`. Every index is built by one
function, :func:`build_from`, from a gallery read chunk by chunk (:class:`MemoryGallery` here, the shards of a
sharded embedding through :mod:`dmlplug.bundle.index_shards`), and records its recall@1 and recall@10 against exact
search measured on queries the index does not hold (a held-out sample of the gallery, see :func:`build_from`)
and its bytes per vector, measured on the serialized index. Embeddings are unit length, so the inner product is
the cosine similarity. Writing and reading index folders is :mod:`dmlplug.bundle.index_files`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from dmlplug.bundle.codecs import new_index, plan, training_rows
from dmlplug.bundle.errors import BundleError

APPROXIMATE = ("ivf", "hnsw")
#: Most gallery vectors held out of an index to measure its recall (at most a tenth of the gallery).
RECALL_QUERIES = 1000
#: A gallery needs this many vectors before a tenth of it (at least one query) can be held out.
MIN_HOLDOUT_GALLERY = 10
#: The recalls every index records (and the ``k`` asked for, when another).
RECALL_KS = (1, 10)
#: Gallery rows compared with the held-out queries at once by the exact search of :class:`ExactTopK`.
EXACT_BLOCK = 16_384


def faiss_module() -> Any:
    """The ``faiss`` module, or ``None`` when it is not installed."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def _require_faiss(codec: str) -> Any:
    faiss = faiss_module()
    if faiss is None:
        raise BundleError(f"a {codec} index needs faiss, which is not installed",
                          fix="pip install faiss-cpu, or build an exact index (--codec float32)")
    return faiss


class Gallery(Protocol):
    """Vectors to index, read in chunks of consecutive rows (so a gallery need not fit in memory)."""

    size: int
    dim: int

    def chunks(self) -> Iterator[tuple[int, np.ndarray, list[str]]]:
        """``(first row, float32 vectors, their paths)`` for consecutive chunks covering every row once."""
        ...

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of the sorted ``rows``."""
        ...


class MemoryGallery:
    """A gallery held in memory: one chunk."""

    def __init__(self, embeddings: np.ndarray, paths: Sequence[str]):
        self.vectors = np.ascontiguousarray(embeddings, dtype=np.float32)
        self.paths = list(paths)
        self.size, self.dim = int(self.vectors.shape[0]), int(self.vectors.shape[1])

    def chunks(self) -> Iterator[tuple[int, np.ndarray, list[str]]]:
        """The whole gallery, one chunk."""
        yield 0, self.vectors, self.paths

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of ``rows``."""
        return self.vectors[rows]


class ExactIndex:
    """Exact inner-product search over unit-length embeddings; a row's label is its position.

    Args:
        embeddings: ``N×D`` float32.
        paths: The path of each row.
        info: Provenance and parameters (``index.json`` keys such as ``model_sha256``).
    """

    kind = "exact"
    codec = "float32"

    def __init__(self, embeddings: np.ndarray, paths: Sequence[str], info: dict[str, Any] | None = None):
        self.embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        self.paths: list[str | None] = list(paths)
        self.dim = int(self.embeddings.shape[1])
        self.info: dict[str, Any] = dict(info or {})
        #: The folder the index was read from (``None`` when built in memory), for messages.
        self.folder: Path | None = None
        self._rebuild()

    def _rebuild(self) -> None:
        faiss = faiss_module()
        self._faiss = None
        if faiss is not None:
            self._faiss = faiss.IndexFlatIP(self.dim)
            self._faiss.add(self.embeddings)

    @classmethod
    def build(cls, embeddings: np.ndarray, paths: Sequence[str], info: dict[str, Any] | None = None) -> ExactIndex:
        """The exact index of ``embeddings`` (nothing measured: it is exact)."""
        return cls(embeddings, paths, info)

    @property
    def size(self) -> int:
        """Vectors held."""
        return len(self.embeddings)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(similarities Q×k, rows Q×k)``, most similar first (``k`` is capped at the gallery size)."""
        k = min(k, self.size)
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if self._faiss is not None:
            return self._faiss.search(queries, k)
        import torch

        sims = torch.from_numpy(queries) @ torch.from_numpy(self.embeddings).T
        values, rows = torch.topk(sims, k, dim=1)
        return values.numpy(), rows.numpy().astype(np.int64)

    def add(self, vectors: np.ndarray, paths: Sequence[str]) -> None:
        """Append rows."""
        self.embeddings = np.concatenate([self.embeddings, np.asarray(vectors, dtype=np.float32)])
        self.paths += list(paths)
        self._rebuild()

    def remove(self, labels: np.ndarray) -> None:
        """Delete the rows ``labels`` (the later rows move up: labels are positions)."""
        self.embeddings = np.delete(self.embeddings, labels, axis=0)
        gone = set(np.asarray(labels).tolist())
        self.paths = [p for i, p in enumerate(self.paths) if i not in gone]
        self._rebuild()

    def files(self, folder: Path) -> tuple[str, list[str]]:
        """Write the vectors into ``folder``; returns ``(storage for index.json, the data files' names)``."""
        if self._faiss is not None:
            faiss_module().write_index(self._faiss, str(folder / "index.faiss"))
            return "faiss", ["index.faiss"]
        import torch

        torch.save(torch.from_numpy(self.embeddings), folder / "embeddings.pt")
        return "torch", ["embeddings.pt"]


class CodedIndex:
    """A faiss index of a :mod:`~dmlplug.bundle.codecs` codec; labels are rows of ``paths`` (``None``: removed).

    Args:
        index: The faiss index (or :class:`~dmlplug.bundle.codecs.BinaryRescored`).
        codec: Its codec.
        paths: The path of each label; removed items leave ``None``.
        info: Parameters and the measured recall (written to index.json).
    """

    def __init__(self, index: Any, codec: str, paths: Sequence[str | None], info: dict[str, Any]):
        self.index = index
        self.codec = self.kind = codec
        self.paths = list(paths)
        self.dim = int(index.d)
        self.info = info
        self.folder: Path | None = None

    @property
    def size(self) -> int:
        """Vectors held (removed ones not counted)."""
        return int(self.index.ntotal)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(similarities Q×k, labels Q×k)``; a label of ``-1`` marks a slot the index could not fill."""
        return self.index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, self.size))

    def add(self, vectors: np.ndarray, paths: Sequence[str]) -> None:
        """Add vectors under new labels (after every label used so far); the quantiser is not retrained."""
        labels = np.arange(len(self.paths), len(self.paths) + len(paths), dtype=np.int64)
        self.index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), labels)
        self.paths += list(paths)

    def remove(self, labels: np.ndarray) -> None:
        """Remove the items ``labels``; their labels are not reused."""
        self.index.remove_ids(np.asarray(labels, dtype=np.int64))
        for label in np.asarray(labels).tolist():
            self.paths[label] = None

    def files(self, folder: Path) -> tuple[str, list[str]]:
        """Write the faiss index (and binary's rescoring vectors) into ``folder``."""
        faiss = faiss_module()
        if self.codec == "binary":
            faiss.write_index_binary(self.index.codes, str(folder / "index.faiss"))
            faiss.write_index(self.index.vectors, str(folder / "rescore.faiss"))
            return "faiss", ["index.faiss", "rescore.faiss"]
        faiss.write_index(self.index, str(folder / "index.faiss"))
        return "faiss", ["index.faiss"]




def serialized_bytes(index: ExactIndex | CodedIndex) -> int:
    """The bytes of the index's data files as written (faiss's serialization), paths not counted."""
    faiss = faiss_module()
    if isinstance(index, ExactIndex):
        if index._faiss is None:
            return int(index.embeddings.nbytes)  # the torch file: the raw tensor plus a few hundred bytes
        return len(faiss.serialize_index(index._faiss))
    if index.codec == "binary":
        return len(faiss.serialize_index_binary(index.index.codes)) + len(faiss.serialize_index(index.index.vectors))
    return len(faiss.serialize_index(index.index))


class ExactTopK:
    """The exact top-``k`` gallery rows of fixed queries, updated chunk by chunk in bounded memory."""

    def __init__(self, queries: np.ndarray, k: int):
        self.queries = np.ascontiguousarray(queries, dtype=np.float32)
        self.k = k
        self.sims = np.full((len(queries), 0), -np.inf, dtype=np.float32)
        self.rows = np.zeros((len(queries), 0), dtype=np.int64)

    def update(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        """Merge the gallery rows ``labels`` (their ``vectors``) into the top-k."""
        for start in range(0, len(vectors), EXACT_BLOCK):
            block_sims = self.queries @ vectors[start:start + EXACT_BLOCK].T
            block_rows = np.broadcast_to(labels[start:start + EXACT_BLOCK], block_sims.shape)
            if block_sims.shape[1] > self.k:  # the block's own top-k first: sorting all of it would dominate
                best = np.argpartition(-block_sims, self.k - 1, axis=1)[:, :self.k]
                block_sims = np.take_along_axis(block_sims, best, 1)
                block_rows = np.take_along_axis(block_rows, best, 1)
            sims = np.concatenate([self.sims, block_sims], axis=1)
            rows = np.concatenate([self.rows, block_rows], axis=1)
            order = np.lexsort((rows, -sims), axis=1)[:, :self.k]  # most similar first, lower row on ties
            self.sims, self.rows = np.take_along_axis(sims, order, 1), np.take_along_axis(rows, order, 1)


def build_from(gallery: Gallery, codec: str, *, k: int = 10, seed: int = 0,
               given: Mapping[str, int | None] | None = None) -> ExactIndex | CodedIndex:
    """Build a ``codec`` index of ``gallery``, measuring its recall@1, @10 (and @k) against exact search.

    A seeded sample of the gallery (a tenth, at most :data:`RECALL_QUERIES`; :func:`holdout_rows`) is held
    out: the quantiser is trained on a seeded sample of the other rows (:func:`~dmlplug.bundle.codecs.training_rows`),
    the other rows are added chunk by chunk while an exact top-k of the held-out queries is kept over them, the
    held-out queries are searched in the index, and then added. A gallery vector searched in an index that
    holds it finds itself, which inflates the recall over what a new query gets; the held-out ones are new to
    the index, as queries are. Each item's label is its gallery row. Memory: the index, one chunk, the training
    sample and the held-out queries.

    Args:
        gallery: The vectors (unit length) and paths.
        codec: One of :data:`~dmlplug.bundle.codecs.CODECS`.
        k: A further recall@k to record.
        seed: Seeds the held-out and training samples.
        given: Parameters set by hand (``nlist``, ``nprobe``, ``pq_m``, ``pq_nbits``, ``rescore``, ``efSearch``;
            ``None`` values are left to :func:`~dmlplug.bundle.codecs.plan`).

    Raises:
        BundleError: faiss is missing for a codec that needs it, or a parameter is impossible.
    """
    faiss = faiss_module()
    if codec == "float32" and faiss is None:  # the torch fallback: exact, nothing to measure
        parts = list(gallery.chunks())
        return ExactIndex(np.concatenate([p[1] for p in parts]), [path for p in parts for path in p[2]])
    _require_faiss(codec)
    held = holdout_rows(gallery.size, seed)
    kept = np.ones(gallery.size, dtype=bool)
    kept[held] = False
    n_kept = int(kept.sum())
    params = plan(codec, n_kept, gallery.dim, k=k, **dict(given or {}))
    index = new_index(faiss, codec, gallery.dim, params)
    if n_train := training_rows(codec, n_kept, params):
        sample = np.sort(np.random.default_rng(seed + 1).choice(np.flatnonzero(kept), n_train, replace=False))
        index.train(gallery.take(sample))
    ks = sorted({min(x, n_kept) for x in (*RECALL_KS, k)}) if len(held) else []
    truth = ExactTopK(gallery.take(held), max(ks, default=0))
    paths: list[str | None] = [None] * gallery.size
    for start, vectors, names in gallery.chunks():
        labels = np.arange(start, start + len(vectors), dtype=np.int64)
        mask = kept[labels]
        index.add_with_ids(np.ascontiguousarray(vectors[mask]), labels[mask])
        if ks:
            truth.update(vectors[mask], labels[mask])
        paths[start:start + len(vectors)] = names
    info: dict[str, Any] = {"codec": codec, **params}
    for x in ks:
        _, found = index.search(truth.queries, x)
        info[f"recall@{x}"] = overlap(truth.rows[:, :x], found)
    info["recall_queries"] = len(held)  # 0: too small a gallery to hold a query out, recall not measured
    if len(held):
        index.add_with_ids(truth.queries, held)
    built: ExactIndex | CodedIndex
    if codec == "float32":
        built = ExactIndex(index.reconstruct_batch(np.arange(gallery.size, dtype=np.int64)), cast(list[str], paths),
                           info)
    else:
        built = CodedIndex(index, codec, paths, info)
    built.info["bytes_per_vector"] = round(serialized_bytes(built) / max(1, built.size), 3)
    return built


def holdout_rows(n: int, seed: int = 0) -> np.ndarray:
    """The sorted gallery rows held out to measure recall: a seeded tenth of ``n``, at most :data:`RECALL_QUERIES`."""
    count = min(RECALL_QUERIES, n // 10) if n >= MIN_HOLDOUT_GALLERY else 0
    return np.sort(np.random.default_rng(seed).choice(n, size=count, replace=False)).astype(np.int64)


def overlap(truth: np.ndarray, found: np.ndarray) -> float:
    """Mean over queries of ``|found ∩ truth| / k`` (``-1``, an unfilled slot, never counts)."""
    k = truth.shape[1]
    hits = [len(set(t.tolist()) & set(f.tolist()) - {-1}) for t, f in zip(truth, found, strict=True)]
    return float(np.mean(hits) / k)


def recall_against_exact(approx: Any, exact: ExactIndex, queries: np.ndarray, k: int) -> float:
    """Mean over ``queries`` of ``|approximate top-k ∩ exact top-k| / k`` (both indexes hold the same rows).

    The queries should not be in the indexes: a vector that is finds itself, and that hit is free.
    """
    k = min(k, exact.size)
    return overlap(exact.search(queries, k)[1], approx.search(queries, k)[1])


def build_index(embeddings: np.ndarray, paths: Sequence[str], *, codec: str | None = None,
                approximate: str | None = None, k: int = 10, **given: int | None) -> ExactIndex | CodedIndex:
    """An index of ``codec`` (default exact ``float32``); ``approximate`` (``"ivf"`` / ``"hnsw"``) is a codec too."""
    return build_from(MemoryGallery(embeddings, paths), codec or approximate or "float32", k=k, given=given)

