"""Galleries to search: exact inner-product indexes, and approximate ones with their measured recall.

The exact index is a faiss ``IndexFlatIP`` (a torch file of the embeddings when faiss is missing); the
approximate ones are faiss IVF or HNSW indexes, whose recall@k against exact search is measured when built, on
queries the index does not hold (a sample of the gallery held out while measuring, see
:meth:`ApproximateIndex.build`). Embeddings are unit length, so the inner product is the cosine similarity.
Writing and reading index folders, and checking them, is :mod:`dmlplug.bundle.index_files`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.bundle.errors import BundleError

APPROXIMATE = ("ivf", "hnsw")
#: Most gallery vectors held out of an approximate index to measure its recall (at most a tenth of the gallery).
RECALL_QUERIES = 1000
#: A gallery needs this many vectors before a tenth of it (at least one query) can be held out.
MIN_HOLDOUT_GALLERY = 10


def faiss_module() -> Any:
    """The ``faiss`` module, or ``None`` when it is not installed."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


class ExactIndex:
    """Exact inner-product search over unit-length embeddings.

    Args:
        embeddings: ``N×D`` float32.
        paths: The path of each row.
        info: Provenance and parameters (``index.json`` keys such as ``model_sha256``).
    """

    kind = "exact"

    def __init__(self, embeddings: np.ndarray, paths: Sequence[str], info: dict[str, Any] | None = None):
        self.embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        self.paths = list(paths)
        self.dim = int(self.embeddings.shape[1])
        self.info: dict[str, Any] = dict(info or {})
        #: The folder the index was read from (``None`` when built in memory), for messages.
        self.folder: Path | None = None
        faiss = faiss_module()
        self._faiss = None
        if faiss is not None:
            self._faiss = faiss.IndexFlatIP(self.dim)
            self._faiss.add(self.embeddings)

    @classmethod
    def build(cls, embeddings: np.ndarray, paths: Sequence[str], info: dict[str, Any] | None = None) -> ExactIndex:
        """The exact index of ``embeddings``."""
        return cls(embeddings, paths, info)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(similarities Q×k, rows Q×k)``, most similar first (``k`` is capped at the gallery size)."""
        k = min(k, len(self.paths))
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if self._faiss is not None:
            return self._faiss.search(queries, k)
        import torch

        sims = torch.from_numpy(queries) @ torch.from_numpy(self.embeddings).T
        values, rows = torch.topk(sims, k, dim=1)
        return values.numpy(), rows.numpy().astype(np.int64)

    def files(self, folder: Path) -> tuple[str, str]:
        """Write the vectors into ``folder``; returns ``(storage for index.json, the file's name)``."""
        if self._faiss is not None:
            faiss_module().write_index(self._faiss, str(folder / "index.faiss"))
            return "faiss", "index.faiss"
        import torch

        torch.save(torch.from_numpy(self.embeddings), folder / "embeddings.pt")
        return "torch", "embeddings.pt"


class ApproximateIndex:
    """A faiss IVF-flat or HNSW-flat inner-product index.

    Args:
        index: The faiss index.
        kind: ``"ivf"`` or ``"hnsw"``.
        paths: The path of each row.
        info: Parameters and the measured recall (written to index.json).
    """

    def __init__(self, index: Any, kind: str, paths: Sequence[str], info: dict[str, Any]):
        self.index = index
        self.kind = kind
        self.paths = list(paths)
        self.dim = int(index.d)
        self.info = info
        self.folder: Path | None = None

    @classmethod
    def build(cls, embeddings: np.ndarray, paths: Sequence[str], kind: str, *, k: int = 10,
              seed: int = 0) -> ApproximateIndex:
        """Train and fill an approximate index, measuring its recall@k against exact search on held-out queries.

        A seeded sample of the gallery (a tenth, at most :data:`RECALL_QUERIES`) is held out: the index is
        trained on and filled with the other vectors, the sample is searched in it and in an exact index of the
        same vectors, and then added. A gallery vector searched in an index that holds it finds itself, which
        inflates the recall over what a new query gets; the held-out ones are new to the index, as queries are.
        The held-out rows come last in the index (``paths`` follows the rows).

        IVF uses ``nlist ≈ √N`` lists (at most N/39, faiss's minimum of training points per list) and probes
        an eighth of them (at least 8); HNSW uses 32 links per node and ``efSearch = max(64, 2k)``.

        Raises:
            BundleError: faiss is missing, or ``kind`` is unknown.
        """
        faiss = faiss_module()
        if faiss is None:
            raise BundleError("an approximate index needs faiss, which is not installed",
                              fix="pip install faiss-cpu, or build an exact index (leave out --approximate)")
        if kind not in APPROXIMATE:
            raise BundleError(f"unknown approximate index {kind!r}", fix=f"use one of {', '.join(APPROXIMATE)}")
        vectors = np.ascontiguousarray(embeddings, dtype=np.float32)
        held = holdout_rows(len(vectors), seed)
        kept = np.setdiff1d(np.arange(len(vectors)), held)
        index, info = _new_index(faiss, kind, vectors[kept], k)
        index.add(vectors[kept])
        if len(held):
            measured_k = min(k, len(kept))
            exact = ExactIndex(vectors[kept], [str(i) for i in kept])
            info[f"recall@{measured_k}"] = recall_against_exact(_Searcher(index), exact, vectors[held], measured_k)
            info["recall_queries"] = len(held)
            index.add(vectors[held])
        else:
            info["recall_queries"] = 0  # too small a gallery to hold a query out: recall not measured
        order = np.concatenate([kept, held])
        return cls(index, kind, [paths[i] for i in order], info)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(similarities Q×k, rows Q×k)``; a row of ``-1`` marks a slot the index could not fill."""
        return self.index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, len(self.paths)))

    def files(self, folder: Path) -> tuple[str, str]:
        """Write the faiss index into ``folder``; returns ``(storage, the file's name)``."""
        faiss_module().write_index(self.index, str(folder / "index.faiss"))
        return "faiss", "index.faiss"


class _Searcher:
    """A bare faiss index with the ``search(queries, k)`` of the index classes."""

    def __init__(self, index: Any):
        self.index = index

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(np.ascontiguousarray(queries, dtype=np.float32), k)


def _new_index(faiss: Any, kind: str, training: np.ndarray, k: int) -> tuple[Any, dict[str, Any]]:
    """An empty, trained faiss index of ``kind`` and its parameters for index.json."""
    n, dim = training.shape
    if kind == "ivf":
        nlist = max(1, min(round(math.sqrt(n)), n // 39))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(training)
        index.nprobe = min(nlist, max(8, nlist // 8))
        return index, {"nlist": nlist, "nprobe": int(index.nprobe)}
    index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efSearch = max(64, 2 * k)
    return index, {"M": 32, "efSearch": int(index.hnsw.efSearch)}


def holdout_rows(n: int, seed: int = 0) -> np.ndarray:
    """The sorted gallery rows held out to measure recall: a seeded tenth of ``n``, at most :data:`RECALL_QUERIES`."""
    count = min(RECALL_QUERIES, n // 10) if n >= MIN_HOLDOUT_GALLERY else 0
    return np.sort(np.random.default_rng(seed).choice(n, size=count, replace=False)).astype(np.int64)


def recall_against_exact(approx: Any, exact: ExactIndex, queries: np.ndarray, k: int) -> float:
    """Mean over ``queries`` of ``|approximate top-k ∩ exact top-k| / k`` (both indexes hold the same rows).

    The queries should not be in the indexes: a vector that is finds itself, and that hit is free.
    """
    k = min(k, len(exact.paths))
    _, truth = exact.search(queries, k)
    _, found = approx.search(queries, k)
    hits = [len(set(t.tolist()) & set(f.tolist()) - {-1}) for t, f in zip(truth, found, strict=True)]
    return float(np.mean(hits) / k)


def build_index(embeddings: np.ndarray, paths: Sequence[str], *, approximate: str | None = None,
                k: int = 10) -> ExactIndex | ApproximateIndex:
    """An exact index, or with ``approximate`` (``"ivf"`` / ``"hnsw"``) an approximate one."""
    if approximate is None:
        return ExactIndex.build(embeddings, paths)
    return ApproximateIndex.build(embeddings, paths, approximate, k=k)


def load_index(folder: str | Path) -> ExactIndex | ApproximateIndex:
    """Read and check an index folder of ``dmlplug index`` (:func:`dmlplug.bundle.index_files.read_index`)."""
    from dmlplug.bundle.index_files import read_index

    return read_index(folder)
