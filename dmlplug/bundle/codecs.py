"""Index codecs: how gallery vectors are stored and searched, each one a faiss index-factory string.

``float32`` is the exact index (:class:`~dmlplug.bundle.index.ExactIndex`); the others are faiss indexes
wrapped by :class:`~dmlplug.bundle.index.CodedIndex`, all labelled with the gallery row (``add_with_ids``) so
that items can be added and removed later:

=========  =================================  ==========================================================
codec      faiss                              stores per vector
=========  =================================  ==========================================================
float16    ``IDMap2,SQfp16``                  2·d bytes (half floats) + an 8-byte label
int8       ``IDMap2,SQ8``                     d bytes (per-dimension 8-bit scalar quantisation, trained)
binary     ``IndexBinaryFlat`` of sign bits   d/8 bytes searched by Hamming distance; a shortlist of
           + ``IDMap2,Flat``                  ``rescore·max(k,10)`` candidates is rescored exactly on the float32
                                              vectors it also stores (so it is larger than float32)
pq         ``IVF{nlist},PQ{m}x{nbits}``       m·nbits/8 bytes (product quantisation in inverted lists)
ivf        ``IVF{nlist},Flat``                4·d bytes, searched in ``nprobe`` of ``nlist`` lists
hnsw       ``IDMap2,HNSW32``                  4·d bytes + the graph
=========  =================================  ==========================================================

The parameters are derived from the gallery size ``n`` and dimension ``d`` by :func:`plan` (and can be set by
hand); :func:`new_index` makes the empty index, :func:`training_rows` says how many vectors train it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dmlplug.bundle.errors import BundleError

#: Every codec, the compressing ones first (the candidates of ``--budget``), then the search structures.
CODECS = ("float32", "float16", "int8", "binary", "pq", "ivf", "hnsw")
#: The codecs ``--budget`` chooses from.
BUDGET_CODECS = ("float32", "float16", "int8", "binary", "pq")
#: Codecs whose faiss index can remove items (HNSW graphs cannot).
REMOVABLE = ("float32", "float16", "int8", "binary", "pq", "ivf")
#: Vectors that train a quantiser when the gallery has more (k-means subsamples to 256 per centroid anyway).
TRAINING_SAMPLE = 65_536
#: The parameters a user may set, per codec.
TUNABLE = {"pq": ("nlist", "nprobe", "pq_m", "pq_nbits"), "ivf": ("nlist", "nprobe"), "binary": ("rescore",),
           "hnsw": ("efSearch",)}


def check_codec(codec: str) -> None:
    """Refuse an unknown codec name.

    Raises:
        BundleError: ``codec`` is not one of :data:`CODECS`.
    """
    if codec not in CODECS:
        raise BundleError(f"unknown index codec {codec!r}", fix=f"use one of {', '.join(CODECS)}")


def plan(codec: str, n: int, dim: int, *, k: int = 10, **given: int | None) -> dict[str, int]:
    """The parameters of a ``codec`` index of ``n`` ``dim``-d vectors; ``given`` ones (not ``None``) win.

    IVF and IVF-PQ use ``nlist ≈ √n`` lists (at most n/39, faiss's minimum of training points per list) and
    probe an eighth of them (at least 8). PQ splits the vector into ``pq_m`` sub-vectors, the largest divisor of
    ``d`` up to d/4 (32 bytes for 128-d), of ``pq_nbits`` bits each: 8, or fewer when the training set is too
    small for 2^nbits centroids of 39 points. Binary rescoring looks at ``rescore·max(k, 10)`` Hamming
    candidates (rescore 10).
    HNSW links 32 neighbours and searches with ``efSearch = max(64, 2k)``.

    Raises:
        BundleError: A given parameter does not apply to the codec or is impossible (``pq_m`` not dividing d).
    """
    check_codec(codec)
    for name, value in given.items():
        if value is not None and name not in TUNABLE.get(codec, ()):
            raise BundleError(f"--{name.replace('_', '-')} does not apply to the {codec} codec",
                              fix=f"leave it out, or use a codec it applies to ({_codecs_of(name)})")
    params: dict[str, int] = {}
    if codec in ("ivf", "pq"):
        nlist = given.get("nlist") or max(1, min(round(math.sqrt(n)), n // 39))
        params["nlist"] = nlist
        params["nprobe"] = min(nlist, given.get("nprobe") or max(8, nlist // 8))
    if codec == "pq":
        m = given.get("pq_m") or max(m for m in range(1, max(1, dim // 4) + 1) if dim % m == 0)
        if dim % m:
            divisors = [x for x in range(1, dim + 1) if dim % x == 0]
            raise BundleError(f"--pq-m {m} does not divide the embedding size {dim}",
                              fix=f"use a divisor of {dim}: {', '.join(map(str, divisors))}")
        params["pq_m"] = m
        params["pq_nbits"] = given.get("pq_nbits") or max(1, min(8, int(math.log2(max(2, n // 39)))))
    if codec == "binary":
        params["rescore"] = given.get("rescore") or 10
    if codec == "hnsw":
        params["M"] = 32
        params["efSearch"] = given.get("efSearch") or max(64, 2 * k)
    return params


def _codecs_of(name: str) -> str:
    return ", ".join(codec for codec, names in TUNABLE.items() if name in names)


def factory_string(codec: str, params: dict[str, int]) -> str:
    """The faiss index-factory string of a float codec (binary has two indexes, float32 is :class:`ExactIndex`)."""
    return {"float16": "IDMap2,SQfp16", "int8": "IDMap2,SQ8", "hnsw": f"IDMap2,HNSW{params.get('M', 32)}",
            "ivf": f"IVF{params.get('nlist', 1)},Flat",
            "pq": f"IVF{params.get('nlist', 1)},PQ{params.get('pq_m', 1)}x{params.get('pq_nbits', 8)}",
            "float32": "IDMap2,Flat"}[codec]  # float32: built as a faiss index, kept as an ExactIndex


def training_rows(codec: str, n: int, params: dict[str, int]) -> int:
    """How many gallery vectors train a ``codec`` index (0: it needs no training)."""
    if codec in ("ivf", "pq"):
        return min(n, max(TRAINING_SAMPLE, 256 * params["nlist"]))
    if codec == "int8":
        return min(n, TRAINING_SAMPLE)
    return 0


def new_index(faiss: Any, codec: str, dim: int, params: dict[str, int]) -> Any:
    """An empty (untrained) faiss index of ``codec``, search parameters set."""
    if codec == "binary":
        return BinaryRescored.empty(faiss, dim, params["rescore"])
    index = faiss.index_factory(dim, factory_string(codec, params), faiss.METRIC_INNER_PRODUCT)
    if codec == "pq":
        index.do_polysemous_training = False  # trains a Hamming ordering of the codes that search never uses
    set_search_params(faiss, index, codec, params)
    return index


def set_search_params(faiss: Any, index: Any, codec: str, params: dict[str, int]) -> None:
    """Set the search-time parameters (``nprobe``, ``efSearch``, ``rescore``) an index file does not keep."""
    if codec in ("ivf", "pq"):
        faiss.extract_index_ivf(index).nprobe = int(params["nprobe"])
    elif codec == "hnsw":  # labelled (IDMap2) since the codecs; a bare graph before
        graph = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap2) else index
        graph.hnsw.efSearch = int(params["efSearch"])
    elif codec == "binary":
        index.rescore = int(params["rescore"])


def code_bytes(codec: str, dim: int, params: dict[str, int]) -> float:
    """A lower bound of what the index stores per vector: its code, and the 8-byte id faiss keeps with it.

    (``float32`` is kept as an :class:`~dmlplug.bundle.index.ExactIndex`: the vectors alone.)
    """
    code = {"float32": 4.0 * dim, "float16": 2.0 * dim, "int8": float(dim), "binary": dim / 8 + 4.0 * dim,
            "pq": params.get("pq_m", 1) * params.get("pq_nbits", 8) / 8, "ivf": 4.0 * dim,
            "hnsw": 4.0 * dim}[codec]
    return code if codec == "float32" else code + 8.0


def binarise(vectors: np.ndarray) -> np.ndarray:
    """Sign bits of each coordinate (1 where positive), packed 8 per byte, zero-padded to whole bytes."""
    return np.packbits(np.asarray(vectors) > 0, axis=1)


class BinaryRescored:
    """Hamming search over sign bits, its shortlist rescored by the exact inner product of the float vectors.

    Args:
        codes: A faiss ``IndexBinaryIDMap2`` of the packed sign bits.
        vectors: A faiss ``IndexIDMap2`` of ``IndexFlatIP`` holding the float32 vectors (same labels).
        rescore: ``rescore·max(k, 10)`` Hamming neighbours are rescored.
    """

    def __init__(self, codes: Any, vectors: Any, rescore: int):
        self.codes, self.vectors, self.rescore = codes, vectors, rescore
        self.d = int(vectors.d)
        self.is_trained = True
        self.metric_type = vectors.metric_type

    @classmethod
    def empty(cls, faiss: Any, dim: int, rescore: int) -> BinaryRescored:
        """An index of no vectors."""
        codes = faiss.IndexBinaryIDMap2(faiss.IndexBinaryFlat(8 * math.ceil(dim / 8)))
        vectors = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        return cls(codes, vectors, rescore)

    @property
    def ntotal(self) -> int:
        """Vectors held."""
        return int(self.vectors.ntotal)

    def train(self, vectors: np.ndarray) -> None:
        """Nothing to train (the sign needs no quantiser)."""

    def add_with_ids(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        """Add ``vectors`` (their sign codes and themselves) under ``labels``."""
        self.codes.add_with_ids(binarise(vectors), labels)
        self.vectors.add_with_ids(vectors, labels)

    def remove_ids(self, labels: np.ndarray) -> int:
        """Remove the items ``labels``; returns how many were removed."""
        self.codes.remove_ids(labels)
        return int(self.vectors.remove_ids(labels))

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(similarities, labels)``: the exact top-``k`` of the ``rescore·max(k, 10)`` nearest codes.

        The shortlist is the nearest codes in Hamming distance; sign codes tie often, so even k = 1 needs a long one.
        """
        shortlist = min(self.ntotal, self.rescore * max(k, 10))
        _, candidates = self.codes.search(binarise(queries), shortlist)
        found = candidates >= 0
        floats = self.vectors.reconstruct_batch(np.where(found, candidates, candidates.max(initial=0)).ravel())
        scores = np.einsum("qkd,qd->qk", floats.reshape(*candidates.shape, self.d), queries)
        scores[~found] = -np.inf
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        sims = np.take_along_axis(scores, order, axis=1).astype(np.float32)
        rows = np.take_along_axis(candidates, order, axis=1)
        rows[~np.isfinite(sims)] = -1
        return sims, rows
