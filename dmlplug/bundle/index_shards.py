"""Reading a sharded embedding (``manifest.json`` + ``shard-*.npz``) as a gallery to index in bounded memory.

The manifest (written by a sharded ``dmlplug embed``) lists the shards in order, each an .npz with the arrays of
a single ``dmlplug embed`` output (``embeddings`` N×D float32, ``paths``), and records the embedding size and
the sha256 of the bundle model that embedded them::

    {"shards": [{"file": "shard-00000-of-00002.npz", "rows": 500}, ...], "total": 1000,
     "embedding_size": 128, "model_sha256": "..."}

A shard entry may also be the bare file name; ``count`` is read as ``rows``; an entry or an .npz that records
its own ``model_sha256`` or ``embedding_size`` must agree with the manifest. :func:`read_shards` checks the
manifest and every shard's array headers (not their data) before anything is built, so a missing shard, a
shard of another model or size, or a count that does not match is one clear error before any slow work.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.bundle.errors import BundleError

MANIFEST = "manifest.json"
FIX = "embed the gallery again with one bundle (dmlplug embed BUNDLE_DIR IMAGES_DIR --out DIR under torchrun)"


class ShardGallery:
    """The shards of a manifest, read one at a time (:class:`~dmlplug.bundle.index.Gallery`).

    Attributes:
        files: Each shard's path and row count, in manifest order.
        size: Rows in all shards.
        dim: The embedding size.
        model_sha256: The bundle model that embedded them.
    """

    def __init__(self, manifest: Path, files: list[tuple[Path, int]], dim: int, model_sha256: str):
        self.manifest, self.files, self.dim, self.model_sha256 = manifest, files, dim, model_sha256
        self.size = sum(rows for _, rows in files)

    def chunks(self) -> Iterator[tuple[int, np.ndarray, list[str]]]:
        """Each shard in turn (only one is in memory at a time)."""
        start = 0
        for path, rows in self.files:
            vectors, paths = _load(path, rows, self.dim)
            yield start, vectors, paths
            start += rows

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of the sorted ``rows``, read shard by shard."""
        parts, start = [], 0
        for path, count in self.files:
            inside = rows[(rows >= start) & (rows < start + count)] - start
            if len(inside):
                with np.load(path) as data:
                    parts.append(np.asarray(data["embeddings"], dtype=np.float32)[inside])
            start += count
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)


def read_shards(source: str | Path) -> ShardGallery:
    """Read and check a manifest (or the folder holding ``manifest.json``).

    Raises:
        BundleError: No readable manifest; shards missing, of another model or embedding size than the
            manifest, or holding another number of rows than it lists.
    """
    source = Path(source)
    manifest = source / MANIFEST if source.is_dir() else source
    try:
        meta = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BundleError(f"{manifest} is not a readable shard manifest: {exc}", where=str(manifest),
                          fix="give the manifest.json of a sharded dmlplug embed, or its folder") from None
    entries = meta.get("shards") if isinstance(meta, dict) else None
    dim, model = (meta.get("embedding_size"), meta.get("model_sha256")) if isinstance(meta, dict) else (None, None)
    if not entries or not isinstance(entries, list) or not isinstance(dim, int) or not isinstance(model, str):
        raise BundleError(f"{manifest} is not a shard manifest: it needs a list of shards, embedding_size and "
                          "model_sha256", where=str(manifest), fix=FIX)
    files = []
    for entry in entries:
        record: dict[str, Any] = {"file": entry} if isinstance(entry, str) else dict(entry)
        name = record.get("file", record.get("path"))
        path = manifest.parent / str(name)
        where = f"shard {name} of {manifest}"
        for key, expected in (("model_sha256", model), ("embedding_size", dim)):
            if record.get(key, expected) != expected:
                raise BundleError(f"{where} records {key} {record[key]!r}, the manifest {expected!r}: the shards "
                                  "come from different models or embedding sizes", where=str(path), fix=FIX)
        shape, recorded = _header(path, where)
        rows = record.get("rows", record.get("count", shape[0]))
        for key, expected in (("model_sha256", model), ("embedding_size", dim)):
            if recorded.get(key, expected) != expected:
                raise BundleError(f"{where} was written with {key} {recorded[key]!r}, the manifest records "
                                  f"{expected!r}: the shards come from different models or embedding sizes",
                                  where=str(path), fix=FIX)
        if len(shape) != 2 or shape[1] != dim or shape[0] != rows:
            raise BundleError(f"{where} holds embeddings of shape {shape}, the manifest records {rows} rows of "
                              f"{dim}-d: the shards come from different models, or a shard was replaced",
                              where=str(path), fix=FIX)
        files.append((path, int(rows)))
    total = meta.get("total")
    if total is not None and total != sum(rows for _, rows in files):
        raise BundleError(f"{manifest} records {total} rows in all, its shards hold {sum(r for _, r in files)}",
                          where=str(manifest), fix=FIX)
    return ShardGallery(manifest, files, dim, model)


def _header(path: Path, where: str) -> tuple[tuple[int, ...], dict[str, Any]]:
    """The shape of a shard's ``embeddings`` (read from the .npy header only) and the scalars it records."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if not {"embeddings.npy", "paths.npy"} <= names:
                raise BundleError(f"{where} has no embeddings and paths arrays", where=str(path), fix=FIX)
            with archive.open("embeddings.npy") as file:
                version = np.lib.format.read_magic(file)
                read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                        else np.lib.format.read_array_header_2_0)
                shape, _, _ = read(file)
        recorded = {}
        with np.load(path) as data:
            for key in ("model_sha256", "embedding_size"):
                if key in data.files:
                    recorded[key] = data[key].item()
    except FileNotFoundError:
        raise BundleError(f"{where} is missing", where=str(path), fix=FIX) from None
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise BundleError(f"{where} cannot be read: {exc}", where=str(path), fix=FIX) from None
    return tuple(shape), recorded


def _load(path: Path, rows: int, dim: int) -> tuple[np.ndarray, list[str]]:
    """A shard's vectors and paths, checked against its manifest entry."""
    try:
        with np.load(path) as data:
            vectors = np.ascontiguousarray(data["embeddings"], dtype=np.float32)
            paths = [str(p) for p in data["paths"]]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise BundleError(f"shard {path} cannot be read: {exc}", where=str(path), fix=FIX) from None
    if vectors.shape != (rows, dim) or len(paths) != rows:
        raise BundleError(f"shard {path} changed while it was read: {vectors.shape} vectors, {len(paths)} paths, "
                          f"manifest {rows} rows of {dim}-d", where=str(path), fix=FIX)
    return vectors, paths
