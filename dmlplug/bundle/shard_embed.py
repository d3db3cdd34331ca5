"""``dmlplug embed`` under torchrun: every rank embeds a disjoint shard, rank 0 writes one manifest.

The steps, the same on every rank (so a failure that one rank sees is seen by all and nobody waits forever):

1. load the bundle and list the images (sorted, so every rank lists the same);
2. refuse an output folder that exists and is not empty — before anything is written;
3. embed this rank's block of whole batches (:func:`~dmlplug.bundle.shards.shard_range`) and write it as
   ``shard-{rank}-of-{world}.npz`` through a temporary file and a rename;
4. gather every rank's record (rows, file size and sha256, the model's sha256, or the error it met);
   if any rank failed, every rank deletes its shard and fails — no manifest, no folder left behind;
5. rank 0 writes ``manifest.json`` (atomically); a barrier lets every rank return once it exists.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.bundle.atomic import check_destination
from dmlplug.bundle.bundle import Bundle, open_embedder
from dmlplug.bundle.errors import BundleError
from dmlplug.bundle.images import describe_failures, list_images
from dmlplug.bundle.shards import (
    SHARD_MANIFEST,
    SHARDS_FORMAT,
    SHARDS_FORMAT_VERSION,
    file_sha256,
    shard_name,
    shard_range,
)
from dmlplug.errors import DmlplugError


def embed_shards(target: Path, images_dir: Path, out: Path, *, batch_size: int, device: str, strict: bool,
                 progress: Callable[[int, str], Any], say: Callable[[str], None]) -> dict[str, Any]:
    """Embed ``images_dir`` with a bundle into a sharded embedding folder ``out``; returns the manifest.

    Run once per process: under torchrun (``WORLD_SIZE > 1``) the ranks share the work through a gloo (CPU) or
    NCCL process group; alone it writes one shard and the manifest.

    Args:
        target: A bundle folder (the manifest records its model's sha256).
        images_dir: The folder of images (searched recursively, sorted).
        out: The folder to create (new or empty).
        batch_size: Images per forward pass; shard boundaries are multiples of it.
        device: Where the model runs (``cuda`` becomes ``cuda:LOCAL_RANK``).
        strict: Fail on an unreadable image instead of skipping it.
        progress: ``progress(total, label)`` -> context manager yielding ``advance(n)`` (shown on rank 0 only).
        say: Prints a line on stderr.

    Raises:
        BundleError: ``target`` is not a bundle, ``out`` is not new or empty, no image could be read, or (on
            every rank) another rank failed.
    """
    from dmlplug.engine import distributed

    info, device = distributed.setup(device)
    try:
        return _embed_shards(info, target, images_dir, out, batch_size=batch_size, device=device, strict=strict,
                             progress=progress, say=say)
    finally:
        distributed.teardown()


def _embed_shards(info: Any, target: Path, images_dir: Path, out: Path, *, batch_size: int, device: str,
                  strict: bool, progress: Callable[[int, str], Any], say: Callable[[str], None]) -> dict[str, Any]:
    from dmlplug.engine import distributed

    bundle = open_embedder(target, device=device)
    if not isinstance(bundle, Bundle):
        raise BundleError(f"{target} is a run directory: sharded embedding needs a bundle (the manifest records "
                          "its model's sha256, which an index built from the shards is checked against)",
                          where=str(target), fix="export the run first: dmlplug export RUN_DIR --out BUNDLE_DIR")
    paths = list_images(images_dir)
    check_destination(out, "sharded embedding")  # every rank sees the same folder: all fail, or none
    created = not out.exists()
    distributed.barrier()  # nobody writes before every rank has checked the folder (and seen whether it exists)
    start, stop = shard_range(len(paths), batch_size, info.rank, info.world_size)
    file = out / shard_name(info.rank, info.world_size)
    record: dict[str, Any] = {"file": file.name, "first_image": start, "images": stop - start}
    failure: DmlplugError | None = None
    try:
        label = f"embedding (rank {info.rank} of {info.world_size})" if info.enabled else "embedding"
        with progress(stop - start if info.is_main else 0, label) as advance:
            embeddings, kept, failures = _embed_block(bundle, paths[start:stop], batch_size, strict, advance)
        for line in describe_failures(failures):
            say(line)
        _write_shard(file, embeddings, kept)
        record.update(rows=len(kept), skipped=len(failures), size=file.stat().st_size, sha256=file_sha256(file),
                      model_sha256=bundle.model_sha256, embedding_size=bundle.embedding_size)
    except (DmlplugError, OSError) as exc:  # e.g. --strict and an unreadable image: every rank must hear of it
        failure = exc if isinstance(exc, DmlplugError) else BundleError(
            f"cannot write shard {file}: {exc}", where=str(file), fix="check the disk space and permissions")
        record["error"] = failure.render()
    records = _gather(record, info)
    errors = [(rank, r["error"]) for rank, r in enumerate(records) if "error" in r]
    if not errors and sum(r["rows"] for r in records) == 0:
        errors = [(0, f"none of the {len(paths)} images could be read")]
    if errors:
        _undo(file, out, created, info)
        if failure is not None:
            raise failure
        rank, message = errors[0]
        raise BundleError(f"rank {rank} failed ({message.splitlines()[0]}); this rank's shard was removed",
                          where=str(out), fix="fix the input and run the embedding again; nothing was written")
    manifest = _manifest(bundle, images_dir, len(paths), batch_size, records)
    if info.is_main:
        from dmlplug.files import write_json

        write_json(out / SHARD_MANIFEST, manifest)
    distributed.barrier()  # every rank returns once the manifest exists
    return manifest


def _embed_block(bundle: Bundle, paths: list[str], batch_size: int, strict: bool,
                 advance: Callable[[int], None]) -> tuple[np.ndarray, list[str], list[Any]]:
    """Embed one rank's block; an empty block (or one without a readable image) gives ``0×D`` rows."""
    if not paths:
        return np.empty((0, bundle.embedding_size), dtype=np.float32), [], []
    embeddings, kept, failures = bundle.embed_files(paths, batch_size=batch_size, strict=strict, progress=advance,
                                                    allow_empty=True)
    if not kept:
        embeddings = np.empty((0, bundle.embedding_size), dtype=np.float32)
    return embeddings, kept, failures


def _write_shard(file: Path, embeddings: np.ndarray, kept: list[str]) -> None:
    """The shard as a single-process ``embed`` writes its .npz (same keys), through a temp file and a rename."""
    from dmlplug.files import atomic_write

    atomic_write(file, lambda f: np.savez(f, embeddings=embeddings, paths=np.asarray(kept, dtype=str)))


def _gather(record: dict[str, Any], info: Any) -> list[dict[str, Any]]:
    """Every rank's record, in rank order, on every rank."""
    if not info.enabled:
        return [record]
    import torch.distributed as dist

    records: list[Any] = [None] * info.world_size
    dist.all_gather_object(records, record)
    return records


def _undo(file: Path, out: Path, created: bool, info: Any) -> None:
    """Remove this rank's shard, and on rank 0 the folder if this embedding created it and it is empty."""
    from dmlplug.engine import distributed

    file.unlink(missing_ok=True)
    distributed.barrier()
    if info.is_main and created:
        with contextlib.suppress(OSError):  # not empty (another writer's files) or already gone: leave it
            out.rmdir()


def _manifest(bundle: Bundle, images_dir: Path, listed: int, batch_size: int,
              records: list[dict[str, Any]]) -> dict[str, Any]:
    """``manifest.json``: what made the shards, from which images, and every shard in row order."""
    from dmlplug.distributions import DMLPLUG_VERSION

    return {
        "format": SHARDS_FORMAT, "format_version": SHARDS_FORMAT_VERSION, "dmlplug_version": DMLPLUG_VERSION,
        "bundle": {"path": str(bundle.path.resolve()), "model_sha256": bundle.model_sha256,
                   "checkpoint_sha256": bundle.manifest["source"]["checkpoint_sha256"]},
        "model_sha256": bundle.model_sha256, "embedding_size": bundle.embedding_size,
        "image_root": str(images_dir), "image_root_absolute": os.path.abspath(images_dir),
        "images": listed, "skipped": sum(r["skipped"] for r in records), "total": sum(r["rows"] for r in records),
        "batch_size": batch_size, "world_size": len(records), "shards": records,
    }
