"""Galleries to search: the exact index and the coded ones (compressed or approximate) with their measured recall.

The exact index (codec ``float32``) keeps the vectors as a numpy array searched by faiss (by a matrix product
when faiss is missing); the others are the indexes of the registered codecs
(:class:`~dmlplug.protocols.IndexCodec`, :mod:`dmlplug.bundle.codec_spec`), wrapped by :class:`CodedIndex`.
Every index is built by one function, :func:`build_from`, from a gallery read chunk by chunk
(:class:`MemoryGallery` here, the shards of a sharded embedding through :mod:`dmlplug.bundle.index_shards`), and
records its recall@1 and recall@10 against exact search measured on queries the index does not hold (a held-out
sample of the gallery, see :func:`build_from`) and its bytes per vector in memory and on disk. Embeddings are unit
length, so the inner product is the cosine similarity. Writing and reading index folders is
:mod:`dmlplug.bundle.index_files`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from dmlplug.bundle.codec_spec import EXACT_CODEC, Codec
from dmlplug.bundle.errors import faiss_module

#: Most gallery vectors held out of an index to measure its recall (at most a tenth of the gallery).
RECALL_QUERIES = 1000
#: A gallery needs this many vectors before a tenth of it (at least one query) can be held out.
MIN_HOLDOUT_GALLERY = 10
#: The recalls every index records (and the ``k`` asked for, when another).
RECALL_KS = (1, 10)
#: Gallery rows compared with the held-out queries at once by the exact search of :class:`ExactTopK`.
EXACT_BLOCK = 16_384




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
    """Exact inner-product search over unit-length embeddings.

    Like a coded index, it labels every item (its id) when it is added and never reuses a label: ``paths`` is
    the path of each label, ``None`` where an item was removed, and the rows of ``embeddings`` are the live
    labels in increasing order (:attr:`labels`).

    Args:
        embeddings: ``N×D`` float32, one row per live label.
        paths: The path of each label (``None``: removed); as many strings as rows.
        info: Provenance and parameters (``index.json`` keys such as ``model_sha256``).
        codec: The name of the codec that built it.
    """

    kind = "exact"
    removable = keeps_floats = True

    def __init__(self, embeddings: np.ndarray, paths: Sequence[str | None], info: dict[str, Any] | None = None,
                 codec: str = EXACT_CODEC):
        self.embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        self.paths: list[str | None] = list(paths)
        #: The label of each row of ``embeddings``, increasing.
        self.labels = np.array([label for label, path in enumerate(self.paths) if path is not None], dtype=np.int64)
        if len(self.labels) != len(self.embeddings):
            raise ValueError(f"{len(self.embeddings)} vectors for {len(self.labels)} paths")
        self.dim = int(self.embeddings.shape[1])
        self.info: dict[str, Any] = dict(info or {})
        self.codec = codec
        #: The folder the index was read from (``None`` when built in memory), for messages.
        self.folder: Path | None = None

    @classmethod
    def build(cls, embeddings: np.ndarray, paths: Sequence[str], info: dict[str, Any] | None = None) -> ExactIndex:
        """The exact index of ``embeddings`` (nothing measured: it is exact)."""
        return cls(embeddings, paths, info)

    @property
    def size(self) -> int:
        """Vectors held."""
        return len(self.embeddings)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(similarities Q×k, labels Q×k)``, most similar first (``k`` is capped at the gallery size)."""
        k = min(k, self.size)
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        faiss = faiss_module()
        if faiss is not None:  # searches the array itself: an IndexFlatIP would hold a second copy of the vectors
            sims, rows = faiss.knn(queries, self.embeddings, k, metric=faiss.METRIC_INNER_PRODUCT)
        else:
            import torch

            values, found = torch.topk(torch.from_numpy(queries) @ torch.from_numpy(self.embeddings).T, k, dim=1)
            sims, rows = values.numpy(), found.numpy().astype(np.int64)
        return sims, np.where(rows >= 0, self.labels[np.maximum(rows, 0)], -1)

    def add(self, vectors: np.ndarray, paths: Sequence[str]) -> None:
        """Append items under new labels (after every label used so far)."""
        self.embeddings = np.concatenate([self.embeddings, np.asarray(vectors, dtype=np.float32)])
        self.labels = np.concatenate([self.labels, np.arange(len(self.paths), len(self.paths) + len(paths))])
        self.paths += list(paths)

    def remove(self, labels: np.ndarray) -> None:
        """Delete the items ``labels``; their labels are not reused."""
        rows = self._rows(labels)
        self.embeddings = np.delete(self.embeddings, rows, axis=0)
        self.labels = np.delete(self.labels, rows)
        for label in np.asarray(labels).tolist():
            self.paths[label] = None

    def reconstruct(self, labels: np.ndarray) -> np.ndarray:
        """The float32 vectors of ``labels``."""
        return self.embeddings[self._rows(labels)]

    def _rows(self, labels: np.ndarray) -> np.ndarray:
        """The rows of live ``labels`` (``labels`` is sorted, so a binary search finds them)."""
        return np.searchsorted(self.labels, np.asarray(labels, dtype=np.int64))

    def sizes(self) -> tuple[int, int]:
        """``(bytes in memory, bytes on disk)``: the vectors, both (the files' few header bytes aside)."""
        return self.embeddings.nbytes, self.embeddings.nbytes

    def files(self, folder: Path) -> tuple[str, list[str]]:
        """Write the vectors into ``folder``; returns ``(storage for index.json, the data files' names)``."""
        faiss = faiss_module()
        if faiss is not None:
            flat = faiss.IndexFlatIP(self.dim)
            flat.add(self.embeddings)
            faiss.write_index(flat, str(folder / "index.faiss"))
            return "faiss", ["index.faiss"]
        import torch

        torch.save(torch.from_numpy(self.embeddings), folder / "embeddings.pt")
        return "torch", ["embeddings.pt"]


class CodedIndex:
    """An index of a registered codec; labels are rows of ``paths`` (``None``: removed).

    Args:
        index: The codec's index (faiss's interface).
        codec: The codec that built it.
        paths: The path of each label; removed items leave ``None``.
        info: Parameters and the measured recall (written to index.json).
    """

    def __init__(self, index: Any, codec: Codec, paths: Sequence[str | None], info: dict[str, Any]):
        self.index = index
        self.codec = self.kind = codec.name
        self.component = codec.component
        self.paths = list(paths)
        self.dim = int(index.d)
        self.info = info
        self.folder: Path | None = None

    @property
    def size(self) -> int:
        """Vectors held (removed ones not counted)."""
        return int(self.index.ntotal)

    @property
    def removable(self) -> bool:
        """Whether items can be removed (the codec says)."""
        return bool(self.component.removable)

    @property
    def keeps_floats(self) -> bool:
        """Whether :meth:`reconstruct` gives the float32 vectors back (the codec says)."""
        return bool(self.component.keeps_floats)

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

    def reconstruct(self, labels: np.ndarray) -> np.ndarray:
        """The float32 vectors of ``labels`` (when :attr:`keeps_floats`)."""
        return np.asarray(self.component.reconstruct(self.index, np.asarray(labels, dtype=np.int64)),
                          dtype=np.float32)

    def sizes(self) -> tuple[int, int]:
        """``(bytes in memory, bytes on disk)`` of the index's data (the codec measures)."""
        memory, disk = self.component.sizes(self.index)
        return int(memory), int(disk)

    def files(self, folder: Path) -> tuple[str, list[str]]:
        """Write the index into ``folder`` (the codec writes its files)."""
        return "faiss", list(self.component.save(self.index, folder))


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


def build_from(gallery: Gallery, codec: Codec, *, k: int = 10, seed: int = 0,
               plan: dict[str, Any] | None = None) -> ExactIndex | CodedIndex:
    """Build a ``codec`` index of ``gallery``, measuring its recall@1, @10 (and @k) against exact search.

    A seeded sample of the gallery (a tenth, at most :data:`RECALL_QUERIES`; :func:`holdout_rows`) is held
    out: the quantiser is trained on a seeded sample of the other rows (the codec's ``training_rows``), the other
    rows are added chunk by chunk while an exact top-k of the held-out queries is kept over them, the held-out
    queries are searched in the index, and then added. A gallery vector searched in an index that holds it finds
    itself, which inflates the recall over what a new query gets; the held-out ones are new to the index, as
    queries are. Each item's label is its gallery row. Memory: the index, one chunk, the training sample and the
    held-out queries.

    Args:
        gallery: The vectors (unit length) and paths.
        codec: The codec (:func:`~dmlplug.bundle.codec_spec.pick_codec`).
        k: A further recall@k to record.
        seed: Seeds the held-out and training samples.
        plan: The index's parameters (default: the codec's ``plan`` for the gallery).

    Raises:
        BundleError: faiss is missing for a codec that needs it, or a parameter is impossible.
    """
    coder = codec.component
    if coder.exact and faiss_module() is None:  # the torch fallback: exact, nothing to measure
        parts = list(gallery.chunks())
        return ExactIndex(np.concatenate([p[1] for p in parts]), [path for p in parts for path in p[2]],
                          codec=codec.name)
    held = holdout_rows(gallery.size, seed)
    kept = np.ones(gallery.size, dtype=bool)
    kept[held] = False
    n_kept = int(kept.sum())
    params = dict(plan) if plan is not None else coder.plan(n_kept, gallery.dim, k)
    index = coder.new_index(gallery.dim, params)
    if n_train := coder.training_rows(n_kept, params):
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
    info: dict[str, Any] = {"codec": codec.name, **params}
    for x in ks:
        _, found = index.search(truth.queries, x)
        info[f"recall@{x}"] = overlap(truth.rows[:, :x], found)
    info["recall_queries"] = len(held)  # 0: too small a gallery to hold a query out, recall not measured
    if len(held):
        index.add_with_ids(truth.queries, held)
    built: ExactIndex | CodedIndex
    if coder.exact:
        built = ExactIndex(coder.reconstruct(index, np.arange(gallery.size, dtype=np.int64)),
                           cast(list[str], paths), info, codec=codec.name)
    else:
        built = CodedIndex(index, codec, paths, info)
    memory, disk = built.sizes()
    built.info["memory_bytes_per_vector"] = round(memory / max(1, built.size), 3)
    built.info["disk_bytes_per_vector"] = round(disk / max(1, built.size), 3)
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


def build_index(embeddings: np.ndarray, paths: Sequence[str], codec: Codec, *, k: int = 10) -> ExactIndex | CodedIndex:
    """An index of ``embeddings`` held in memory; see :func:`build_from`."""
    return build_from(MemoryGallery(embeddings, paths), codec, k=k)
