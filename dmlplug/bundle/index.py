"""Galleries to search: exact inner-product indexes, and approximate ones with their measured recall.

The exact index is a faiss ``IndexFlatIP`` (a torch file of the embeddings when faiss is missing); the
approximate ones are faiss IVF or HNSW indexes, whose recall@k against exact search is measured when built.

An index folder holds ``index.json`` (kind, size, dimension, parameters, measured recall), ``paths.json``
(one path per row) and ``index.faiss`` or ``embeddings.pt``. Embeddings are unit length, so the inner
product is the cosine similarity.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.bundle.errors import BundleError
from dmlplug.files import write_json

INDEX_FILE, PATHS_FILE = "index.json", "paths.json"
APPROXIMATE = ("ivf", "hnsw")
#: Gallery vectors searched to measure an approximate index's recall against exact search.
RECALL_QUERIES = 1000


def _faiss() -> Any:
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
    """

    kind = "exact"

    def __init__(self, embeddings: np.ndarray, paths: Sequence[str]):
        self.embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        self.paths = list(paths)
        self.dim = int(self.embeddings.shape[1])
        self.info: dict[str, Any] = {}
        faiss = _faiss()
        self._faiss = None
        if faiss is not None:
            self._faiss = faiss.IndexFlatIP(self.dim)
            self._faiss.add(self.embeddings)

    @classmethod
    def build(cls, embeddings: np.ndarray, paths: Sequence[str]) -> ExactIndex:
        """The exact index of ``embeddings``."""
        return cls(embeddings, paths)

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

    def files(self, folder: Path) -> str:
        """Write the vectors into ``folder``; returns the storage name for index.json."""
        if self._faiss is not None:
            _faiss().write_index(self._faiss, str(folder / "index.faiss"))
            return "faiss"
        import torch

        torch.save(torch.from_numpy(self.embeddings), folder / "embeddings.pt")
        return "torch"


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

    @classmethod
    def build(cls, embeddings: np.ndarray, paths: Sequence[str], kind: str, *, k: int = 10,
              seed: int = 0) -> ApproximateIndex:
        """Train and fill an approximate index, then measure its recall@k against exact search.

        IVF uses ``nlist ≈ √N`` lists (at most N/39, faiss's minimum of training points per list) and probes
        an eighth of them (at least 8); HNSW uses 32 links per node and ``efSearch = max(64, 2k)``.

        Raises:
            BundleError: faiss is missing, or ``kind`` is unknown.
        """
        faiss = _faiss()
        if faiss is None:
            raise BundleError("an approximate index needs faiss, which is not installed",
                              fix="pip install faiss-cpu, or build an exact index (leave out --approximate)")
        vectors = np.ascontiguousarray(embeddings, dtype=np.float32)
        n, dim = vectors.shape
        if kind == "ivf":
            nlist = max(1, min(round(math.sqrt(n)), n // 39))
            index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
            index.train(vectors)
            index.nprobe = min(nlist, max(8, nlist // 8))
            info: dict[str, Any] = {"nlist": nlist, "nprobe": int(index.nprobe)}
        elif kind == "hnsw":
            index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efSearch = max(64, 2 * k)
            info = {"M": 32, "efSearch": int(index.hnsw.efSearch)}
        else:
            raise BundleError(f"unknown approximate index {kind!r}", fix=f"use one of {', '.join(APPROXIMATE)}")
        index.add(vectors)
        built = cls(index, kind, paths, info)
        info[f"recall@{min(k, n)}"] = recall_against_exact(built, ExactIndex(vectors, paths), vectors, k, seed)
        return built

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(similarities Q×k, rows Q×k)``; a row of ``-1`` marks a slot the index could not fill."""
        return self.index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, len(self.paths)))

    def files(self, folder: Path) -> str:
        """Write the faiss index into ``folder``."""
        _faiss().write_index(self.index, str(folder / "index.faiss"))
        return "faiss"


def recall_against_exact(approx: Any, exact: ExactIndex, vectors: np.ndarray, k: int, seed: int = 0) -> float:
    """Mean over sampled gallery vectors of ``|approximate top-k ∩ exact top-k| / k``."""
    rng = np.random.default_rng(seed)
    take = rng.choice(len(vectors), size=min(RECALL_QUERIES, len(vectors)), replace=False)
    k = min(k, len(vectors))
    _, truth = exact.search(vectors[take], k)
    _, found = approx.search(vectors[take], k)
    hits = [len(set(t.tolist()) & set(f.tolist()) - {-1}) for t, f in zip(truth, found, strict=True)]
    return float(np.mean(hits) / k)


def build_index(embeddings: np.ndarray, paths: Sequence[str], *, approximate: str | None = None,
                k: int = 10) -> ExactIndex | ApproximateIndex:
    """An exact index, or with ``approximate`` (``"ivf"`` / ``"hnsw"``) an approximate one."""
    if approximate is None:
        return ExactIndex.build(embeddings, paths)
    return ApproximateIndex.build(embeddings, paths, approximate, k=k)


def save_index(index: ExactIndex | ApproximateIndex, folder: Path, extra: dict[str, Any]) -> None:
    """Write ``index`` into the (new, empty) ``folder``: its vectors, ``paths.json`` and ``index.json``."""
    storage = index.files(folder)
    write_json(folder / PATHS_FILE, index.paths)
    write_json(folder / INDEX_FILE, {"kind": index.kind, "storage": storage, "size": len(index.paths),
                                     "dim": index.dim, **index.info, **extra})


def load_index(folder: str | Path) -> ExactIndex | ApproximateIndex:
    """Read an index folder written by ``dmlplug index``.

    Raises:
        BundleError: Not an index folder, a file is missing, or it needs faiss and faiss is missing.
    """
    folder = Path(folder)
    fix = "build it again: dmlplug index BUNDLE_DIR IMAGES_DIR --out INDEX_DIR"
    try:
        meta = json.loads((folder / INDEX_FILE).read_text(encoding="utf-8"))
        paths = json.loads((folder / PATHS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BundleError(f"{folder} is not a readable index folder: {exc}", where=str(folder), fix=fix) from None
    faiss = _faiss()
    info = {key: value for key, value in meta.items() if key not in ("kind", "storage", "size", "dim")}
    if meta["storage"] == "torch":
        import torch

        index: ExactIndex | ApproximateIndex = ExactIndex(torch.load(folder / "embeddings.pt").numpy(), paths)
    elif faiss is None:
        raise BundleError(f"the index in {folder} is a faiss index and faiss is not installed", where=str(folder),
                          fix="pip install faiss-cpu")
    else:
        stored = faiss.read_index(str(folder / "index.faiss"))
        if meta["kind"] == "exact":
            index = ExactIndex(stored.reconstruct_n(0, stored.ntotal), paths)
        else:
            if meta["kind"] == "ivf":
                stored.nprobe = int(meta["nprobe"])
            else:
                stored.hnsw.efSearch = int(meta["efSearch"])
            index = ApproximateIndex(stored, meta["kind"], paths, {})
    index.info = info
    return index
