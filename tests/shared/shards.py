"""A sharded embedding in the layout `dmlplug embed` writes under torchrun, built from arrays (for index tests)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dmlplug.bundle.shards import SHARD_MANIFEST, SHARDS_FORMAT, SHARDS_FORMAT_VERSION, file_sha256, shard_name


def write_shards(folder: Path, embeddings: np.ndarray, paths: list[str], bounds, model: str = "m" * 64,
                 root: Path | None = None) -> Path:
    """Shards ``embeddings[bounds[i]:bounds[i+1]]`` and their manifest, as one sharded ``dmlplug embed`` would;
    ``root`` is the image folder the manifest records (``image_root``), none when not given."""
    folder.mkdir(parents=True, exist_ok=True)
    world = len(bounds) - 1
    entries = []
    for rank, (start, stop) in enumerate(zip(bounds, bounds[1:], strict=False)):
        file = folder / shard_name(rank, world)
        np.savez(file, embeddings=np.asarray(embeddings[start:stop], dtype=np.float32),
                 paths=np.asarray(paths[start:stop], dtype=str))
        entries.append({"file": file.name, "rows": stop - start, "size": file.stat().st_size,
                        "sha256": file_sha256(file), "model_sha256": model, "embedding_size": embeddings.shape[1]})
    manifest = {"format": SHARDS_FORMAT, "format_version": SHARDS_FORMAT_VERSION, "model_sha256": model,
                "embedding_size": int(embeddings.shape[1]), "total": int(bounds[-1] - bounds[0]), "shards": entries}
    if root is not None:
        manifest.update(image_root=str(root), image_root_absolute=str(root.absolute()))
    (folder / SHARD_MANIFEST).write_text(json.dumps(manifest))
    return folder
