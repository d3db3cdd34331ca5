"""Adding items to and removing items from an index folder without rebuilding it.

Vectors are added to the trained index as they are (the quantiser is not trained again) under new labels (their
ids), and items are removed by label (faiss ``remove_ids``; an exact index deletes the rows; a codec that cannot
remove, such as an HNSW graph, says so: ``removable``). The folder is then written anew beside the old one and
swapped in (:func:`~dmlplug.bundle.atomic.replace_folder`), so a failure leaves the old index whole. The recall recorded
at build time stays (``index.json`` counts the items added and removed since); bytes per vector are measured
again on the new files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dmlplug.bundle.atomic import replace_folder
from dmlplug.bundle.errors import BundleError
from dmlplug.bundle.gallery_paths import find_labels, gallery_root, stored_paths
from dmlplug.bundle.index import CodedIndex, ExactIndex
from dmlplug.bundle.index_files import read_index, save_index

if TYPE_CHECKING:
    from dmlplug.registry import Registry


def add_items(index: ExactIndex | CodedIndex, vectors: np.ndarray, paths: Sequence[str]) -> list[int]:
    """Add ``vectors`` named ``paths`` to ``index``; returns their ids (new labels, after every label used so far).

    The paths are taken as the index stores them (:func:`add_files` turns image files into those).

    Raises:
        BundleError: The vectors have another size than the index's, or a path is already indexed (or given
            twice).
    """
    where = str(index.folder or "the index")
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[1] != index.dim or len(vectors) != len(paths):
        raise BundleError(f"cannot add {vectors.shape} embeddings named by {len(paths)} paths to {where}, an index of "
                          f"{index.dim}-d vectors", where=where, fix="embed the new images with the index's bundle")
    known = {p for p in index.paths if p is not None}
    seen: set[str] = set()
    twice = [p for p in paths if p in known or p in seen or seen.add(p)]  # type: ignore[func-returns-value]
    if twice:
        raise BundleError(f"{len(twice)} of the paths to add are already in {where} or given twice, e.g. {twice[0]}",
                          where=where, fix="remove them first (dmlplug index-remove), or leave them out")
    first = len(index.paths)
    try:
        index.add(vectors, paths)
    except RuntimeError as exc:  # faiss: an index written before items were labelled (a bare HNSW graph)
        raise BundleError(f"{where} cannot take new items: {str(exc).splitlines()[-1]}", where=where,
                          fix="build the index again (dmlplug index), then add to it") from None
    index.info["added_since_build"] = int(index.info.get("added_since_build", 0)) + len(paths)
    return list(range(first, first + len(paths)))


def add_files(index: ExactIndex | CodedIndex, vectors: np.ndarray, files: Sequence[str]) -> list[int]:
    """Add the embeddings of image ``files`` (absolute), stored relative to the index's gallery root.

    A file under the root is stored relative to it, one outside by its absolute path; an index without a root
    (of an older dmlplug) stores the absolute paths. Returns the new ids; raises as :func:`add_items`.
    """
    return add_items(index, vectors, stored_paths(gallery_root(index), files))


def remove_items(index: ExactIndex | CodedIndex, items: Sequence[str | int]) -> list[int]:
    """Remove ``items`` from ``index``: each an id, a stored path, or a path of the same file; returns the ids.

    Raises:
        BundleError: The index's codec cannot remove (HNSW), or an item is not in it
            (:func:`~dmlplug.bundle.gallery_paths.find_labels`).
    """
    where = str(index.folder or "the index")
    if not index.removable:
        raise BundleError(f"{where} is a {index.codec} index, which cannot remove items", where=where,
                          fix="build the index again without them, or with a codec that can (e.g. --codec ivf)")
    labels = sorted(set(find_labels(index, items)))
    index.remove(np.array(labels, dtype=np.int64))
    index.info["removed_since_build"] = int(index.info.get("removed_since_build", 0)) + len(labels)
    return labels


def rewrite(index: ExactIndex | CodedIndex, folder: Path) -> None:
    """Write the edited ``index`` over its ``folder`` (a new folder swapped in)."""
    replace_folder(folder, lambda new: save_index(index, new, {}))


def edit_folder(folder: str | Path, registry: Registry | None, *, add: tuple[np.ndarray, Sequence[str]] | None = None,
                remove: Sequence[str | int] = ()) -> ExactIndex | CodedIndex:
    """Read the index ``folder`` (codecs from ``registry``), remove ``remove``, add ``add``, save.

    ``remove`` holds ids or paths (:func:`remove_items`), ``add`` vectors and their stored paths (:func:`add_items`).
    """
    index = read_index(folder, registry)
    if remove:
        remove_items(index, remove)
    if add is not None:
        add_items(index, *add)
    rewrite(index, Path(folder))
    return index
