"""The binary codec: sign bits in memory, searched by Hamming distance, the shortlist rescored.

As sentence-transformers' binary quantisation with rescoring: the index in memory holds each vector's sign bits
(``d/8`` bytes) and its label (8 bytes); a query's ``rescore·max(k, 10)`` nearest codes in Hamming distance are
rescored by the inner product of the float32 query with

* ``disk`` (the default): the float32 vectors, kept in ``vectors.npy`` and read through a memory map (only the
  shortlist's rows are read: the operating system keeps what fits in its page cache);
* ``int8``: int8 codes of the vectors kept in memory (``d`` bytes more a vector; per-dimension ranges trained on
  a sample), ``int8.npy`` and ``int8_ranges.npy``;
* ``none``: nothing; the Hamming order stands and the similarity is the angle estimate ``cos(π·h/bits)``.

Rows of the rescoring data are labels (:class:`~.label_rows.LabelRows`), so no label map is kept beside them.
An index written before the sources existed keeps the float32 vectors in a faiss index, ``rescore.faiss``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.bundle.errors import require_faiss
from dmlplug_builtins.codecs.faiss_codecs import ID_BYTES, INDEX_FILE, TRAINING_SAMPLE
from dmlplug_builtins.codecs.label_rows import LabelRows


def sign_bits(vectors: np.ndarray) -> np.ndarray:
    """Sign bits of each coordinate (1 where positive), packed 8 per byte, zero-padded to whole bytes."""
    return np.packbits(np.asarray(vectors) > 0, axis=1)


class DiskFloats:
    """The float32 vectors on disk by label (``vectors.npy``), read through a memory map."""

    file = "vectors.npy"
    trained = True

    def __init__(self, rows: LabelRows):
        self.rows = rows

    @classmethod
    def empty(cls, dim: int) -> DiskFloats:
        """No vectors yet."""
        return cls(LabelRows(dim, np.float32, on_disk=True))

    def train(self, vectors: np.ndarray) -> None:
        """Nothing to train."""

    def write(self, labels: np.ndarray, vectors: np.ndarray) -> None:
        """Keep ``vectors`` under ``labels``."""
        self.rows.write(labels, vectors)

    def clear(self, labels: np.ndarray) -> None:
        """Forget removed items: their rows become zero, so a saved index keeps no vector of them."""
        self.rows.write(labels, np.zeros((len(labels), self.rows.width), np.float32))

    def floats(self, labels: np.ndarray) -> np.ndarray:
        """The vectors of ``labels``."""
        return self.rows.read(labels)

    def sizes(self) -> tuple[int, int]:
        """Nothing in memory (the page cache aside), the ``.npy`` file on disk (128-byte header)."""
        return 0, self.rows.nbytes + 128

    def save(self, folder: Path) -> list[str]:
        """``vectors.npy``."""
        self.rows.save(folder / self.file)
        return [self.file]

    @classmethod
    def load(cls, folder: Path, dim: int) -> DiskFloats:
        """Memory-map ``vectors.npy``."""
        return cls(LabelRows.load(folder / cls.file, dim, np.float32, on_disk=True))


class Int8Codes:
    """int8 codes of the vectors in memory by label (``int8.npy``), ranges trained on a sample (``int8_ranges.npy``)."""

    files = ("int8.npy", "int8_ranges.npy")

    def __init__(self, rows: LabelRows, ranges: np.ndarray | None = None):
        self.rows, self.ranges = rows, ranges  # ranges: each dimension's lowest value and step

    @property
    def trained(self) -> bool:
        """Whether the ranges are known."""
        return self.ranges is not None

    @classmethod
    def empty(cls, dim: int) -> Int8Codes:
        """No codes, no ranges yet."""
        return cls(LabelRows(dim, np.uint8, on_disk=False))

    def train(self, vectors: np.ndarray) -> None:
        """Each dimension's range over ``vectors``: 255 steps from its minimum to its maximum."""
        low = vectors.min(axis=0)
        spread = vectors.max(axis=0) - low
        self.ranges = np.stack([low, np.where(spread > 0, spread, 1.0) / 255]).astype(np.float32)

    def write(self, labels: np.ndarray, vectors: np.ndarray) -> None:
        """Code ``vectors`` (clipped to the ranges) under ``labels``."""
        assert self.ranges is not None
        codes = np.clip(np.rint((vectors - self.ranges[0]) / self.ranges[1]), 0, 255)
        self.rows.write(labels, codes.astype(np.uint8))

    def clear(self, labels: np.ndarray) -> None:
        """Zero the codes of removed items."""
        self.rows.write(labels, np.zeros((len(labels), self.rows.width), np.uint8))

    def floats(self, labels: np.ndarray) -> np.ndarray:
        """The decoded vectors of ``labels``."""
        assert self.ranges is not None
        return self.rows.read(labels) * self.ranges[1] + self.ranges[0]

    def sizes(self) -> tuple[int, int]:
        """The codes and ranges in memory; on disk, the same in two ``.npy`` files (128-byte headers)."""
        memory = self.rows.nbytes + 8 * self.rows.width
        return memory, memory + 2 * 128

    def save(self, folder: Path) -> list[str]:
        """``int8.npy`` (the codes) and ``int8_ranges.npy``."""
        assert self.ranges is not None
        self.rows.save(folder / self.files[0])
        np.save(folder / self.files[1], self.ranges)
        return list(self.files)

    @classmethod
    def load(cls, folder: Path, dim: int) -> Int8Codes:
        """Read the codes and the ranges into memory."""
        ranges = np.load(folder / cls.files[1])
        if ranges.shape != (2, dim) or ranges.dtype != np.float32:
            raise ValueError(f"{cls.files[1]} of {ranges.dtype} {ranges.shape}, not float32 (2, {dim})")
        return cls(LabelRows.load(folder / cls.files[0], dim, np.uint8, on_disk=False), ranges)


class FaissFloats:
    """The float32 vectors in memory in a faiss ``IDMap2,Flat`` (``rescore.faiss``), as older binary indexes had."""

    file = "rescore.faiss"
    trained = True

    def __init__(self, index: Any):
        self.index = index

    def train(self, vectors: np.ndarray) -> None:
        """Nothing to train."""

    def write(self, labels: np.ndarray, vectors: np.ndarray) -> None:
        """Add ``vectors`` under ``labels``."""
        self.index.add_with_ids(vectors, labels)

    def clear(self, labels: np.ndarray) -> None:
        """Remove ``labels``."""
        self.index.remove_ids(labels)

    def floats(self, labels: np.ndarray) -> np.ndarray:
        """The vectors of ``labels``."""
        return np.asarray(self.index.reconstruct_batch(labels))

    def sizes(self) -> tuple[int, int]:
        """The serialized faiss index, in memory and in the file."""
        size = len(require_faiss("a binary index").serialize_index(self.index))
        return size, size

    def save(self, folder: Path) -> list[str]:
        """``rescore.faiss``."""
        require_faiss("a binary index").write_index(self.index, str(folder / self.file))
        return [self.file]


#: The rescoring sources a binary codec can be given.
SOURCES: dict[str, type[DiskFloats] | type[Int8Codes]] = {"disk": DiskFloats, "int8": Int8Codes}


class BinaryIndex:
    """Sign bits in a faiss ``IndexBinaryIDMap``, searched by Hamming distance; the shortlist rescored from ``source``.

    Args:
        codes: The labelled binary index.
        dim: The vectors' dimension.
        rescore: ``rescore·max(k, 10)`` Hamming neighbours are rescored.
        source: Where the rescoring vectors come from (``None``: no rescoring).
    """

    metric_type = 0  # faiss.METRIC_INNER_PRODUCT: similarities, larger is better

    def __init__(self, codes: Any, dim: int, rescore: int, source: Any = None):
        self.codes, self.d, self.rescore, self.source = codes, dim, rescore, source
        self.bits = 8 * math.ceil(dim / 8)

    @classmethod
    def empty(cls, dim: int, plan: dict[str, Any]) -> BinaryIndex:
        """An index of no vectors."""
        faiss = require_faiss("a binary index")
        codes = faiss.IndexBinaryIDMap(faiss.IndexBinaryFlat(8 * math.ceil(dim / 8)))
        source = SOURCES[plan["rescore_from"]].empty(dim) if plan["rescore_from"] in SOURCES else None
        return cls(codes, dim, int(plan["rescore"]), source)

    @property
    def ntotal(self) -> int:
        """Vectors held."""
        return int(self.codes.ntotal)

    @property
    def is_trained(self) -> bool:
        """Whether vectors can be added (int8 codes need their ranges first)."""
        return self.source is None or bool(self.source.trained)

    def train(self, vectors: np.ndarray) -> None:
        """Train the rescoring source (the sign needs no quantiser)."""
        if self.source is not None:
            self.source.train(vectors)

    def add_with_ids(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        """Add ``vectors`` (their sign bits, and to the rescoring source) under ``labels``."""
        self.codes.add_with_ids(sign_bits(vectors), labels)
        if self.source is not None:
            self.source.write(labels, vectors)

    def remove_ids(self, labels: np.ndarray) -> int:
        """Remove the items ``labels``; returns how many were removed."""
        removed = int(self.codes.remove_ids(labels))
        if self.source is not None:
            self.source.clear(labels)
        return removed

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(similarities, labels)``: the top-``k`` of the ``rescore·max(k, 10)`` nearest codes, rescored.

        The shortlist is the nearest codes in Hamming distance; sign codes tie often, so even k = 1 needs a long one.
        """
        if self.source is None:
            hamming, labels = self.codes.search(sign_bits(queries), k)
            sims = np.cos(np.pi * hamming / self.bits).astype(np.float32)
            return np.where(labels >= 0, sims, -np.inf).astype(np.float32), labels
        shortlist = min(self.ntotal, self.rescore * max(k, 10))
        _, candidates = self.codes.search(sign_bits(queries), shortlist)
        found = candidates >= 0
        floats = self.source.floats(np.where(found, candidates, candidates.max(initial=0)).ravel())
        scores = np.einsum("qkd,qd->qk", floats.reshape(*candidates.shape, self.d), queries)
        scores[~found] = -np.inf
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        sims = np.take_along_axis(scores, order, axis=1).astype(np.float32)
        rows = np.take_along_axis(candidates, order, axis=1)
        rows[~np.isfinite(sims)] = -1
        return sims, rows

    def sizes(self) -> tuple[int, int]:
        """``(memory, disk)``: the codes and labels in both, and the rescoring source's share of each."""
        codes = len(require_faiss("a binary index").serialize_index_binary(self.codes))
        memory, disk = self.source.sizes() if self.source is not None else (0, 0)
        return codes + memory, codes + disk

    def save(self, folder: Path) -> list[str]:
        """``index.faiss`` (the codes), then the rescoring source's file."""
        require_faiss("a binary index").write_index_binary(self.codes, str(folder / INDEX_FILE))
        return [INDEX_FILE, *(self.source.save(folder) if self.source is not None else [])]

    @classmethod
    def load(cls, folder: Path, plan: dict[str, Any]) -> BinaryIndex:
        """The index :meth:`save` wrote (or an older dmlplug: ``rescore.faiss`` and no ``rescore_from``)."""
        faiss = require_faiss("a binary index")
        codes = faiss.read_index_binary(str(folder / INDEX_FILE))
        dim = int(plan.get("dim") or codes.d)  # index.json records it; the bits are it when d is a multiple of 8
        bits = 8 * math.ceil(dim / 8)
        if not isinstance(codes, faiss.IndexBinaryIDMap | faiss.IndexBinaryIDMap2) or codes.d != bits:
            raise ValueError(f"a {type(codes).__name__} of {codes.ntotal} {codes.d}-bit codes")
        source = plan.get("rescore_from")
        if source is None:  # written before the sources (read with the default Params: disk, which keeps floats too)
            floats = faiss.read_index(str(folder / FaissFloats.file))
            if not isinstance(floats, faiss.IndexIDMap2) or floats.ntotal != codes.ntotal or floats.d != dim:
                raise ValueError(f"a {type(floats).__name__} of {floats.ntotal} {floats.d}-d rescoring vectors")
            return cls(codes, dim, int(plan.get("rescore", 10)), FaissFloats(floats))
        return cls(codes, dim, int(plan["rescore"]), SOURCES[source].load(folder, dim) if source in SOURCES else None)


class BinaryCodec:
    """The ``binary`` codec (module docstring): its plan, floor and files; the index is :class:`BinaryIndex`.

    Args:
        params: ``rescore`` and ``rescore_from``.
    """

    exact = False
    removable = True

    def __init__(self, params: Any):
        self.params = params
        self.keeps_floats = params.rescore_from == "disk"

    def plan(self, n: int, dim: int, k: int) -> dict[str, Any]:
        """The shortlist multiplier and the rescoring source, as given."""
        return {"rescore": self.params.rescore, "rescore_from": self.params.rescore_from}

    def budget_plans(self, n: int, dim: int, k: int) -> list[dict[str, Any]]:
        """The one plan."""
        return [self.plan(n, dim, k)]

    def bytes_floor(self, dim: int, plan: dict[str, Any]) -> float:
        """The sign bits and the label in memory, and int8 codes when they rescore."""
        return math.ceil(dim / 8) + ID_BYTES + (dim if plan.get("rescore_from") == "int8" else 0)

    def training_rows(self, n: int, plan: dict[str, Any]) -> int:
        """A sample for int8's ranges."""
        return min(n, TRAINING_SAMPLE) if plan.get("rescore_from") == "int8" else 0

    def new_index(self, dim: int, plan: dict[str, Any]) -> BinaryIndex:
        """An empty :class:`BinaryIndex`."""
        return BinaryIndex.empty(dim, plan)

    def reconstruct(self, index: BinaryIndex, labels: np.ndarray) -> np.ndarray:
        """The float32 vectors of ``labels`` (from disk)."""
        assert index.source is not None
        return np.asarray(index.source.floats(labels), dtype=np.float32)

    def sizes(self, index: BinaryIndex) -> tuple[int, int]:
        """See :meth:`BinaryIndex.sizes`."""
        return index.sizes()

    def save(self, index: BinaryIndex, folder: Path) -> list[str]:
        """See :meth:`BinaryIndex.save`."""
        return index.save(folder)

    def load(self, folder: Path, plan: dict[str, Any]) -> BinaryIndex:
        """See :meth:`BinaryIndex.load`."""
        return BinaryIndex.load(folder, plan)
