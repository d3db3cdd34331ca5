"""Sharded embedding files: the layout ``dmlplug embed`` writes under torchrun, and :func:`read_shards`.

A sharded embedding is a folder of ``shard-{rank:05d}-of-{world:05d}.npz`` files, each with the arrays of a
single-process ``dmlplug embed`` output (``embeddings`` ``n×D`` float32, ``paths``), and one ``manifest.json``
written by rank 0 after every shard exists (docs/bundle.md, "Sharded embedding"). Concatenating the shards in
manifest order gives the single-process output bit for bit on the CPU: rank ``r`` embeds a contiguous block of
the sorted image list whose boundaries are multiples of the batch size (:func:`shard_range`), so every batch,
and so every floating-point operation, is the same as in one process.

:func:`open_shards` checks a manifest (and every file it names) before anything is read, so a consumer such as
an index builder fails before doing work; :func:`read_shards` then yields the shards one at a time, in order,
in bounded memory.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.bundle.errors import BundleError

#: The file that makes a folder a sharded embedding.
SHARD_MANIFEST = "manifest.json"
#: What ``manifest.json`` says it is, and the layout version this dmlplug reads and writes.
SHARDS_FORMAT, SHARDS_FORMAT_VERSION = "dmlplug-embedding-shards", 1
#: How to get a good sharded embedding again.
EMBED_AGAIN = "embed the images again: torchrun --nproc-per-node N -m dmlplug embed BUNDLE IMAGES --out DIR"


def shard_name(rank: int, world_size: int) -> str:
    """The file name of rank ``rank``'s shard: ``shard-00001-of-00002.npz``."""
    return f"shard-{rank:05d}-of-{world_size:05d}.npz"


def shard_range(num_images: int, batch_size: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[start, stop)`` of the sorted image list that rank ``rank`` embeds.

    Whole batches are dealt out as evenly as possible (ranks differ by at most one batch), so a shard's batches
    are exactly the batches one process would run over the same positions, and the outputs agree bit for bit.

    Args:
        num_images: Images listed in the folder.
        batch_size: Images per forward pass.
        rank: This process's rank.
        world_size: Number of processes.
    """
    batches = -(-num_images // batch_size)
    first, last = rank * batches // world_size, (rank + 1) * batches // world_size
    return min(first * batch_size, num_images), min(last * batch_size, num_images)


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB blocks (bounded memory)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Shard:
    """One shard as read from its file.

    Attributes:
        rank: The rank that wrote it (its position in the manifest).
        file: The ``.npz`` file.
        embeddings: ``rows×D`` float32, unit length.
        paths: The image of each row.
    """

    rank: int
    file: Path
    embeddings: np.ndarray
    paths: list[str]


@dataclass(frozen=True)
class ShardSet:
    """A checked ``manifest.json`` and its folder (see :func:`open_shards`).

    Attributes:
        folder: The folder holding the manifest and the shards.
        manifest: ``manifest.json`` as a dict.
    """

    folder: Path
    manifest: dict[str, Any]

    @property
    def total(self) -> int:
        """Rows over all shards."""
        return int(self.manifest["total"])

    @property
    def embedding_size(self) -> int:
        """``D``."""
        return int(self.manifest["embedding_size"])

    @property
    def model_sha256(self) -> str:
        """The sha256 of the bundle's model file that made every shard."""
        return str(self.manifest["model_sha256"])

    @property
    def files(self) -> list[Path]:
        """The shard files, in manifest (row) order."""
        return [self.folder / entry["file"] for entry in self.manifest["shards"]]

    def check_bundle(self, model_sha256: str, embedding_size: int) -> None:
        """Refuse shards made by another model than a bundle's (e.g. before indexing them for that bundle).

        Raises:
            BundleError: Another model sha256 or embedding size.
        """
        if model_sha256 != self.model_sha256 or embedding_size != self.embedding_size:
            raise BundleError(
                f"the shards in {self.folder} were embedded by the model with sha256 {self.model_sha256[:12]}… "
                f"({self.embedding_size}-d), not by this bundle's ({model_sha256[:12]}…, {embedding_size}-d)",
                where=str(self.folder / SHARD_MANIFEST), fix=f"use the bundle that embedded them, or {EMBED_AGAIN}")

    def __iter__(self) -> Iterator[Shard]:
        """The shards in order, one file in memory at a time, each checked against the manifest again."""
        for rank, (entry, file) in enumerate(zip(self.manifest["shards"], self.files, strict=True)):
            yield _load_shard(self, rank, entry, file)


def open_shards(path: str | Path, *, verify_files: bool = True) -> ShardSet:
    """Read and check a sharded embedding's manifest (a ``manifest.json`` or the folder holding it).

    Checked before any shard is loaded: the manifest's layout; that every shard it lists exists with the size
    and sha256 recorded (``verify_files``; reads each file once, in blocks); that every shard was made by the
    same model (sha256) with the same embedding size as the manifest says; and that the row counts add up.

    Raises:
        BundleError: What is wrong, where, and how to get a good sharded embedding.
    """
    file = Path(path)
    if file.is_dir():
        file = file / SHARD_MANIFEST
    folder = file.parent
    if not file.is_file():
        raise BundleError(f"{folder} is not a sharded embedding: it has no {SHARD_MANIFEST} (the embedding did not "
                          "finish, or this is another folder)", where=str(folder), fix=EMBED_AGAIN)
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BundleError(f"{file} is not readable JSON: {exc}", where=str(file), fix=EMBED_AGAIN) from None
    if not isinstance(manifest, dict) or manifest.get("format") != SHARDS_FORMAT:
        raise BundleError(f"{file} is not a manifest of sharded embeddings (no \"format\": {SHARDS_FORMAT!r})",
                          where=str(file), fix=EMBED_AGAIN)
    if manifest.get("format_version") != SHARDS_FORMAT_VERSION:
        raise BundleError(f"{file} is sharded-embedding layout version {manifest.get('format_version')!r}; this "
                          f"dmlplug reads version {SHARDS_FORMAT_VERSION}", where=str(file),
                          fix=f"use the dmlplug version that wrote it, or {EMBED_AGAIN}")
    problem = _manifest_problem(manifest)
    if problem:
        raise BundleError(f"{file} is damaged: {problem}", where=str(file), fix=EMBED_AGAIN)
    shards = ShardSet(folder, manifest)
    for entry, shard_file in zip(manifest["shards"], shards.files, strict=True):
        _check_entry(shards, entry, shard_file, verify_files)
    return shards


def read_shards(path: str | Path) -> Iterator[Shard]:
    """The shards of a sharded embedding, in manifest order, after :func:`open_shards` checked all of them.

    Concatenating their ``embeddings`` (and ``paths``) gives what a single-process ``dmlplug embed`` writes.

    Args:
        path: ``manifest.json`` or the folder holding it.

    Raises:
        BundleError: The manifest or a shard is missing, damaged, or of another model or embedding size
            (raised at the first ``next()``, before any shard is yielded).
    """
    yield from open_shards(path)


def _manifest_problem(manifest: dict[str, Any]) -> str | None:
    """What keeps ``manifest`` from being a manifest this dmlplug wrote, or ``None``."""
    size = manifest.get("embedding_size")
    if not isinstance(size, int) or size < 1:
        return f"`embedding_size` is {size!r}, not a positive integer"
    if not isinstance(manifest.get("model_sha256"), str):
        return "it records no `model_sha256`"
    shards = manifest.get("shards")
    if not isinstance(shards, list) or not shards:
        return "it lists no shards"
    for rank, entry in enumerate(shards):
        if not isinstance(entry, dict) or entry.get("file") != shard_name(rank, len(shards)):
            return f"shard {rank} is not named {shard_name(rank, len(shards))}"
        if not all(isinstance(entry.get(key), int) and entry[key] >= 0 for key in ("rows", "size")):
            return f"shard {rank} has no row count or size"
    total = sum(entry["rows"] for entry in shards)
    if manifest.get("total") != total:
        return f"`total` is {manifest.get('total')!r} but its shards hold {total} rows"
    return None


def _check_entry(shards: ShardSet, entry: dict[str, Any], file: Path, verify_files: bool) -> None:
    """Check one listed shard: made by the manifest's model, present, and of the recorded size and sha256."""
    where = str(shards.folder / SHARD_MANIFEST)
    if entry.get("model_sha256") != shards.model_sha256 or entry.get("embedding_size") != shards.embedding_size:
        raise BundleError(
            f"shard {entry['file']} was embedded by another model (sha256 {str(entry.get('model_sha256'))[:12]}…, "
            f"{entry.get('embedding_size')}-d) than the manifest's ({shards.model_sha256[:12]}…, "
            f"{shards.embedding_size}-d): shards of different models cannot be mixed", where=where,
            fix=f"embed every shard with one bundle: {EMBED_AGAIN}")
    if not file.is_file():
        raise BundleError(f"shard {entry['file']} listed in the manifest is missing", where=str(file),
                          fix=f"restore the file, or {EMBED_AGAIN}")
    if not verify_files:
        return
    if file.stat().st_size != entry["size"] or file_sha256(file) != entry.get("sha256"):
        raise BundleError(f"shard {entry['file']} is not the file the manifest records (its size or sha256 "
                          "differs: changed or damaged since it was written)", where=str(file), fix=EMBED_AGAIN)


def _load_shard(shards: ShardSet, rank: int, entry: dict[str, Any], file: Path) -> Shard:
    """Load one shard and check its arrays against the manifest."""
    try:
        with np.load(file, allow_pickle=False) as data:
            embeddings, paths = data["embeddings"], [str(p) for p in data["paths"]]
    except (OSError, ValueError, KeyError) as exc:
        raise BundleError(f"shard {file.name} cannot be read as embeddings and paths: {exc}", where=str(file),
                          fix=EMBED_AGAIN) from None
    rows = entry["rows"]
    if embeddings.dtype != np.float32 or embeddings.shape != (rows, shards.embedding_size) or len(paths) != rows:
        raise BundleError(f"shard {file.name} holds {embeddings.dtype} embeddings of shape {embeddings.shape} and "
                          f"{len(paths)} paths; the manifest records {rows}×{shards.embedding_size} float32",
                          where=str(file), fix=EMBED_AGAIN)
    return Shard(rank, file, embeddings, paths)
