"""A sharded embedding (:mod:`dmlplug.bundle.shards`) as a gallery to index in bounded memory.

The manifest and every shard are checked by :func:`~dmlplug.bundle.shards.open_shards` before anything is built
(missing or changed shards, shards of another model or embedding size, counts that do not add up: one clear
error before any slow work); the index builder then reads one shard at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from dmlplug.bundle.gallery_paths import absolute_paths, stored_paths
from dmlplug.bundle.shards import SHARD_MANIFEST, ShardSet, open_shards


class ShardGallery:
    """The shards of a sharded embedding, read one at a time (:class:`~dmlplug.bundle.index.Gallery`).

    Args:
        shards: The checked manifest.

    Attributes:
        manifest: The ``manifest.json`` file, for messages.
        size: Rows in all shards.
        dim: The embedding size.
        model_sha256: The bundle model that embedded them.
        root: The absolute image folder the manifest records (``None`` when it records none): an index of the
            shards records it as its gallery root.
    """

    def __init__(self, shards: ShardSet):
        self.shards = shards
        self.manifest = shards.folder / SHARD_MANIFEST
        self.size, self.dim, self.model_sha256 = shards.total, shards.embedding_size, shards.model_sha256
        self._rows = [int(entry["rows"]) for entry in shards.manifest["shards"]]
        given, root = shards.manifest.get("image_root"), shards.manifest.get("image_root_absolute")
        self._given: str | None = str(given) if given and root else None
        self.root: str | None = str(root) if given and root else None

    def files(self, paths: list[str]) -> list[str]:
        """The absolute files of a shard's ``paths`` (relative to the working directory of the embedding)."""
        return absolute_paths(paths, self._given, self.root)

    def chunks(self) -> Iterator[tuple[int, np.ndarray, list[str]]]:
        """``(first row, vectors, paths)`` of each shard in turn (only one is in memory at a time).

        The paths are those an index rooted at :attr:`root` stores (as written when the manifest has no root).
        """
        start = 0
        for shard in self.shards:
            names = shard.paths if self.root is None else stored_paths(self.root, self.files(shard.paths))
            yield start, np.ascontiguousarray(shard.embeddings, dtype=np.float32), names
            start += len(shard.paths)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of the sorted ``rows``, read shard by shard."""
        parts, start = [], 0
        for file, count in zip(self.shards.files, self._rows, strict=True):
            inside = rows[(rows >= start) & (rows < start + count)] - start
            if len(inside):
                with np.load(file, allow_pickle=False) as data:
                    parts.append(np.asarray(data["embeddings"], dtype=np.float32)[inside])
            start += count
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)


def shard_gallery(source: str | Path) -> ShardGallery:
    """The checked sharded embedding at ``source`` (its ``manifest.json`` or the folder holding it).

    Raises:
        BundleError: The manifest or a shard is missing, damaged, or of another model or embedding size.
    """
    return ShardGallery(open_shards(source))


def is_sharded(source: Path) -> bool:
    """Whether ``source`` names a sharded embedding (a manifest file or a folder holding one)."""
    return source.name == SHARD_MANIFEST or (source / SHARD_MANIFEST).is_file()
