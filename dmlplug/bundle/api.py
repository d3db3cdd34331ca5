"""The public API for plugins that use bundles and indexes: load, verify, embed, search, add and remove.

What ``dmlplug search``, ``dmlplug index-add`` and ``dmlplug index-remove`` do, as functions on loaded objects
that return plain data, for a plugin that serves or batches them (the built-in ``serve`` plugin uses nothing
else). Each function is the command's own code path, so a plugin gets the same checks, the same errors
(:class:`~dmlplug.bundle.errors.BundleError`) and the same result shapes. docs/plugin-api.md lists this module.

Example::

    from dmlplug.bundle import api

    bundle, index = api.open_for_search("bundle", "index", registry=registry, threads=2)
    vectors = bundle.embed([pil_image])                       # N×D float32, unit length
    results = api.search_vectors(index, vectors, ["q"], k=5, threshold=bundle.threshold)
    index, ids = api.add_files(Path("index"), registry, vectors, ["/gallery/new.png"])
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dmlplug.bundle.atomic import folder_lock
from dmlplug.bundle.gallery_paths import gallery_root, resolve
from dmlplug.bundle.index_files import INDEX_FILE, PROBE_TOLERANCE, read_index
from dmlplug.bundle.rerank_search import check_rerankable
from dmlplug.bundle.search import check_searchable, search_vectors
from dmlplug.data.image_files import IMAGE_EXTENSIONS
from dmlplug.evaluation.rerank_spec import RerankSpec, parse_rerank

if TYPE_CHECKING:
    from dmlplug.bundle.bundle import Bundle
    from dmlplug.bundle.index import CodedIndex, ExactIndex
    from dmlplug.registry import Registry

__all__ = [
    "IMAGE_EXTENSIONS", "INDEX_FILE", "PROBE_TOLERANCE", "RerankSpec", "add_files", "check_rerankable",
    "check_searchable", "folder_lock", "gallery_root", "item_file", "load_bundle", "open_for_search",
    "parse_rerank", "probe_gap", "read_index", "remove_items", "search_vectors",
]


def load_bundle(path: str | Path, *, device: str = "cpu", threads: int | None = None) -> Bundle:
    """Load and verify a bundle folder (:func:`dmlplug.load_bundle`), its model on ``threads`` threads.

    Args:
        path: A bundle folder of ``dmlplug export``.
        device: Where the model runs.
        threads: Threads of ONNX Runtime's session (``None``: its default, every core); a server with several
            workers shares the cores out so that they do not oversubscribe them. A TorchScript model runs on
            torch's threads, which the caller sets (``torch.set_num_threads``).
    """
    from dmlplug.bundle.bundle import load_bundle as load

    return load(path, device=device, threads=threads)


def open_for_search(bundle_dir: str | Path, index_dir: str | Path, *, registry: Registry, device: str = "cpu",
                    threads: int | None = None) -> tuple[Bundle, ExactIndex | CodedIndex]:
    """Load and verify a bundle and an index folder exactly as ``dmlplug search`` does.

    Raises:
        BundleError: Either folder is damaged or not one, or the bundle's model did not build the index.
    """
    bundle = load_bundle(bundle_dir, device=device, threads=threads)
    index = read_index(index_dir, registry)
    check_searchable(bundle, index)
    return bundle, index


def probe_gap(index: Any, bundle: Bundle) -> float | None:
    """How far (max abs difference) the bundle embeds the probe input from what the index records.

    ``None`` when the index records no probe. Within :data:`PROBE_TOLERANCE`: the same weights built the index.
    Unlike :func:`check_searchable`, the model always runs: a readiness check re-checks the live model.
    """
    recorded = (getattr(index, "info", None) or {}).get("probe")
    if recorded is None:
        return None
    ours = bundle.probe()
    recorded = np.asarray(recorded, dtype=np.float64)
    return float(np.abs(recorded - ours).max()) if recorded.shape == ours.shape else float("inf")


def add_files(index_dir: Path, registry: Registry, vectors: np.ndarray,
              files: Sequence[str | Path]) -> tuple[ExactIndex | CodedIndex, list[int]]:
    """Add image ``files`` (absolute) with their embeddings to the index folder, as ``dmlplug index-add``.

    The folder is read, edited and swapped in whole (:func:`~dmlplug.bundle.index_edit.rewrite`) under the
    folder's exclusive lock (:func:`folder_lock`): a crash at any point leaves the old folder or the new one, and
    writers of other processes wait their turn.

    Returns:
        The edited index and the new items' ids.
    """
    from dmlplug.bundle.index_edit import add_files as add
    from dmlplug.bundle.index_edit import rewrite

    index = read_index(index_dir, registry)
    ids = add(index, vectors, [str(file) for file in files])
    rewrite(index, Path(index_dir))
    return index, ids


def remove_items(index_dir: Path, registry: Registry,
                 items: Sequence[str | int]) -> tuple[ExactIndex | CodedIndex, list[int]]:
    """Remove items (ids or paths) from the index folder, as ``dmlplug index-remove``; swapped in whole.

    Returns:
        The edited index and the removed ids.

    Raises:
        BundleError: An item is not in the index, or its codec cannot remove items.
    """
    from dmlplug.bundle.index_edit import remove_items as remove
    from dmlplug.bundle.index_edit import rewrite

    index = read_index(index_dir, registry)
    ids = remove(index, items)
    rewrite(index, Path(index_dir))
    return index, ids


def item_file(index: Any, item_id: int) -> Path | None:
    """The file of item ``item_id`` (absolute when the index records its gallery root), ``None`` if no such item."""
    paths = getattr(index, "paths", [])
    if not 0 <= item_id < len(paths) or paths[item_id] is None:
        return None
    return Path(resolve(gallery_root(index), paths[item_id]))
