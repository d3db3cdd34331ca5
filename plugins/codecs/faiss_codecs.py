"""The codecs that are one faiss index (an index-factory string): float32, float16, int8, pq, ivf and hnsw.

Every item is labelled by its gallery row (``IDMap``, or the inverted lists' own ids) so that it can be removed
later; ``IDMap2`` (a hash map from label to row besides, about 44 bytes a vector in memory that the serialized
index does not show) only where the vectors must be given back by label (float32's build, hnsw).

The parameters are derived from the gallery size ``n`` and dimension ``d`` by each codec's ``plan`` (those the
Params give win): IVF and IVF-PQ use ``nlist ≈ √n`` lists (at most n/39, faiss's minimum of training points
per list) and probe an eighth of them (at least 8); PQ splits the vector into ``pq_m`` sub-vectors, the largest
divisor of ``d`` up to d/4, of ``pq_nbits`` bits each (8, or fewer when the training set is too small for
2^nbits centroids of 39 points); HNSW links 32 neighbours and searches with ``ef_search = max(64, 2k)``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.bundle.errors import BundleError, require_faiss

#: Vectors that train a quantiser when the gallery has more (k-means subsamples to 256 per centroid anyway).
TRAINING_SAMPLE = 65_536
#: The file of a faiss index.
INDEX_FILE = "index.faiss"
#: The id faiss keeps with each vector.
ID_BYTES = 8


class FaissCodec:
    """A codec whose index is one faiss index of ``factory(plan)``, searched by inner product.

    Args:
        params: The codec's validated Params.
        name: Its registered name, for messages.
    """

    exact = False
    removable = True
    keeps_floats = False
    #: Whether ``--budget`` chooses from it (a compression, not a search structure).
    compresses = True
    #: The faiss class of the index under the labels, and the scalar quantiser type it must have (if any).
    inner = "IndexFlat"
    qtype: str | None = None

    def __init__(self, params: Any, name: str):
        self.params, self.name = params, name

    def factory(self, plan: dict[str, Any]) -> str:
        """The faiss index-factory string of ``plan``."""
        raise NotImplementedError

    def code_bytes(self, dim: int, plan: dict[str, Any]) -> float:
        """The code of one vector, in bytes."""
        return 4.0 * dim

    def plan(self, n: int, dim: int, k: int) -> dict[str, Any]:
        """No parameters."""
        return {}

    def budget_plans(self, n: int, dim: int, k: int) -> list[dict[str, Any]]:
        """The one plan, when the codec compresses."""
        return [self.plan(n, dim, k)] if self.compresses else []

    def bytes_floor(self, dim: int, plan: dict[str, Any]) -> float:
        """The code and its id."""
        return self.code_bytes(dim, plan) + ID_BYTES

    def training_rows(self, n: int, plan: dict[str, Any]) -> int:
        """Nothing to train."""
        return 0

    def new_index(self, dim: int, plan: dict[str, Any]) -> Any:
        """The empty faiss index, search parameters set."""
        faiss = require_faiss(f"a {self.name} index")
        index = faiss.index_factory(dim, self.factory(plan), faiss.METRIC_INNER_PRODUCT)
        self.configure(faiss, index, plan)
        return index

    def configure(self, faiss: Any, index: Any, plan: dict[str, Any]) -> None:
        """Set the search parameters that an index file does not keep."""

    def reconstruct(self, index: Any, labels: np.ndarray) -> np.ndarray:
        """The stored vectors of ``labels``."""
        return np.asarray(index.reconstruct_batch(labels))

    def sizes(self, index: Any) -> tuple[int, int]:
        """The serialized faiss index: what the file holds and what is loaded."""
        size = len(require_faiss(f"a {self.name} index").serialize_index(index))
        return size, size

    def save(self, index: Any, folder: Path) -> list[str]:
        """``index.faiss``."""
        require_faiss(f"a {self.name} index").write_index(index, str(folder / INDEX_FILE))
        return [INDEX_FILE]

    def load(self, folder: Path, plan: dict[str, Any]) -> Any:
        """``index.faiss``, checked to be this codec's kind of index."""
        faiss = require_faiss(f"a {self.name} index")
        index = faiss.read_index(str(folder / INDEX_FILE))
        labelled = isinstance(index, faiss.IndexIDMap)  # IndexIDMap2 too
        inner = faiss.downcast_index(index.index) if labelled else index
        if (not isinstance(inner, getattr(faiss, self.inner)) or index.metric_type != faiss.METRIC_INNER_PRODUCT
                or (self.qtype and inner.sq.qtype != getattr(faiss.ScalarQuantizer, self.qtype))):
            raise ValueError(f"a {type(inner).__name__} of {index.ntotal} {index.d}-d vectors")
        self.configure(faiss, index, plan)
        return index


class Float32(FaissCodec):
    """Exact search of the float32 vectors (dmlplug keeps them itself; this index only builds them)."""

    exact = True
    keeps_floats = True

    def factory(self, plan: dict[str, Any]) -> str:
        """Labelled vectors."""
        return "IDMap2,Flat"

    def bytes_floor(self, dim: int, plan: dict[str, Any]) -> float:
        """The vectors alone (the exact index labels rows by position)."""
        return 4.0 * dim


class ScalarQuantised(FaissCodec):
    """Every coordinate quantised alone: float16 (``SQfp16``) or int8 (``SQ8``, per-dimension ranges trained).

    Labelled by ``IDMap``: nothing reads a vector back by label (an index of an older dmlplug has ``IDMap2``).
    """

    inner = "IndexScalarQuantizer"

    def __init__(self, params: Any, name: str, *, bits: int):
        super().__init__(params, name)
        self.bits = bits
        self.qtype = "QT_fp16" if bits == 16 else "QT_8bit"

    def factory(self, plan: dict[str, Any]) -> str:
        """``IDMap,SQfp16`` or ``IDMap,SQ8``."""
        return "IDMap,SQfp16" if self.bits == 16 else "IDMap,SQ8"

    def code_bytes(self, dim: int, plan: dict[str, Any]) -> float:
        """``bits/8`` bytes a coordinate."""
        return dim * self.bits / 8

    def training_rows(self, n: int, plan: dict[str, Any]) -> int:
        """int8's ranges are trained on a sample; float16 needs none."""
        return min(n, TRAINING_SAMPLE) if self.bits == 8 else 0


class InvertedLists(FaissCodec):
    """IVF: ``nlist`` lists (k-means centroids), ``nprobe`` of them searched; flat vectors (ivf) or PQ codes (pq)."""

    inner = "IndexIVFFlat"
    compresses = False
    keeps_floats = True

    def plan(self, n: int, dim: int, k: int) -> dict[str, Any]:
        """``nlist ≈ √n`` (at most n/39), ``nprobe = nlist/8`` (at least 8, at most nlist)."""
        nlist = self.params.nlist or max(1, min(round(math.sqrt(n)), n // 39))
        return {"nlist": nlist, "nprobe": min(nlist, self.params.nprobe or max(8, nlist // 8))}

    def factory(self, plan: dict[str, Any]) -> str:
        """``IVF{nlist},Flat``."""
        return f"IVF{plan['nlist']},Flat"

    def training_rows(self, n: int, plan: dict[str, Any]) -> int:
        """A sample, 256 per list when more lists need them."""
        return min(n, max(TRAINING_SAMPLE, 256 * plan["nlist"]))

    def configure(self, faiss: Any, index: Any, plan: dict[str, Any]) -> None:
        """``nprobe`` (1 in an index.json written before the codecs that leaves it out)."""
        faiss.extract_index_ivf(index).nprobe = int(plan.get("nprobe", 1))

    def reconstruct(self, index: Any, labels: np.ndarray) -> np.ndarray:
        """By label through a hash table (labels have gaps after removals; memory only, not saved)."""
        faiss = require_faiss(f"a {self.name} index")
        faiss.extract_index_ivf(index).set_direct_map_type(faiss.DirectMap.Hashtable)
        return np.asarray(index.reconstruct_batch(labels))


class ProductQuantised(InvertedLists):
    """IVF-PQ: each vector split into ``pq_m`` sub-vectors, each coded in ``pq_nbits`` bits."""

    inner = "IndexIVFPQ"
    compresses = True
    keeps_floats = False

    def plan(self, n: int, dim: int, k: int, pq_m: int | None = None) -> dict[str, Any]:
        """The lists' plan, and ``pq_m`` (the largest divisor of d up to d/4) × ``pq_nbits`` (8 when trainable).

        Raises:
            BundleError: ``pq_m`` does not divide ``dim``.
        """
        m = pq_m or self.params.pq_m or max(m for m in range(1, max(1, dim // 4) + 1) if dim % m == 0)
        if dim % m:
            divisors = [x for x in range(1, dim + 1) if dim % x == 0]
            raise BundleError(f"pq_m {m} does not divide the embedding size {dim}",
                              fix=f"use a divisor of {dim}: {', '.join(map(str, divisors))}")
        nbits = self.params.pq_nbits or max(1, min(8, int(math.log2(max(2, n // 39)))))
        return {**super().plan(n, dim, k), "pq_m": m, "pq_nbits": nbits}

    def budget_plans(self, n: int, dim: int, k: int) -> list[dict[str, Any]]:
        """The given ``pq_m``, or every divisor of d up to d/2, the most sub-quantisers first.

        More sub-quantisers of the same bits keep more of each vector; beyond d/2 the codes would be as large as
        int8's, which needs no k-means per sub-vector to train.
        """
        if self.params.pq_m:
            return [self.plan(n, dim, k)]
        return [self.plan(n, dim, k, pq_m=m) for m in range(max(1, dim // 2), 0, -1) if dim % m == 0]

    def factory(self, plan: dict[str, Any]) -> str:
        """``IVF{nlist},PQ{m}x{nbits}``."""
        return f"IVF{plan['nlist']},PQ{plan['pq_m']}x{plan['pq_nbits']}"

    def code_bytes(self, dim: int, plan: dict[str, Any]) -> float:
        """``pq_m·pq_nbits/8``."""
        return float(plan["pq_m"] * plan["pq_nbits"] / 8)

    def new_index(self, dim: int, plan: dict[str, Any]) -> Any:
        """The IVF-PQ index, without polysemous training (a Hamming ordering of the codes search never uses)."""
        index = super().new_index(dim, plan)
        index.do_polysemous_training = False
        return index


class Graph(FaissCodec):
    """HNSW: a graph of 32 links per vector, searched with ``ef_search`` candidates; cannot remove items."""

    inner = "IndexHNSW"
    removable = False
    keeps_floats = True
    compresses = False

    def plan(self, n: int, dim: int, k: int) -> dict[str, Any]:
        """32 links, ``ef_search = max(64, 2k)``."""
        return {"M": 32, "ef_search": self.params.ef_search or max(64, 2 * k)}

    def factory(self, plan: dict[str, Any]) -> str:
        """``IDMap2,HNSW{M}``."""
        return f"IDMap2,HNSW{plan.get('M', 32)}"

    def configure(self, faiss: Any, index: Any, plan: dict[str, Any]) -> None:
        """``ef_search`` (``efSearch`` in an index.json before the codecs were plugins; 64 before the codecs)."""
        graph = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap) else index
        graph.hnsw.efSearch = int(plan.get("ef_search") or plan.get("efSearch") or 64)
