"""Where an index's items are: the gallery root an index records, stored paths, and the files they resolve to.

An index built from a folder records the folder as ``root`` (absolute) in ``index.json`` and each item's path
relative to it in ``paths.json``, so a search run from any working directory can name a file the user can open
(:func:`resolve`), and the index folder and the gallery can move together with one edit of ``root``. An item
added from outside the root is stored by its absolute path. An index of an older dmlplug records no root: its
paths are the ones given when it was built, stored and shown as they are.

Every item also has an **id**: its label, given when it is added and never reused after it is removed
(:class:`~dmlplug.bundle.index.ExactIndex` and :class:`~dmlplug.bundle.index.CodedIndex` alike), so a search
result's id stays valid for removal however the index was edited since.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from dmlplug.bundle.errors import BundleError

#: The ``index.json`` key of the gallery root (an absolute folder).
ROOT_KEY = "root"


def gallery_root(index: Any) -> str | None:
    """The absolute gallery root ``index`` records, or ``None`` (an index of an older dmlplug, or in memory)."""
    root = (getattr(index, "info", None) or {}).get(ROOT_KEY)
    return str(root) if isinstance(root, str) and root else None


def absolute_paths(paths: Sequence[str], given_root: str | None = None,
                   absolute_root: str | None = None) -> list[str]:
    """The absolute files of ``paths`` listed under ``given_root`` (as typed) that is ``absolute_root`` (absolute).

    ``dmlplug embed`` writes paths that start with the folder as it was typed, relative to the working directory
    it ran in; with the folder's absolute path recorded beside them, they resolve from any working directory.
    Without it (an .npz of an older dmlplug) a relative path is taken from the current working directory.

    Args:
        paths: Image paths, each under ``given_root`` when it is given.
        given_root: The folder the paths were listed under, as typed.
        absolute_root: The same folder, absolute.
    """
    if given_root is None or absolute_root is None:
        return [os.path.abspath(p) for p in paths]
    return [os.path.normpath(os.path.join(absolute_root, os.path.relpath(p, given_root))) for p in paths]


def stored_paths(root: str | None, files: Sequence[str]) -> list[str]:
    """How an index with gallery ``root`` stores ``files`` (absolute): relative to the root when under it.

    A file outside the root keeps its absolute path. Without a root (an index of an older dmlplug, whose other
    paths are as they were typed) the files are stored as given: absolute, so they open from anywhere.
    """
    if root is None:
        return list(files)
    out = []
    for file in files:
        relative = os.path.relpath(file, root)
        out.append(file if relative == os.pardir or relative.startswith(os.pardir + os.sep) else relative)
    return out


def resolve(root: str | None, stored: str) -> str:
    """The file a stored path names: under ``root`` when relative; the stored path itself without a root."""
    return stored if root is None or os.path.isabs(stored) else os.path.normpath(os.path.join(root, stored))


def find_labels(index: Any, items: Sequence[str | int]) -> list[int]:
    """The labels (ids) of ``items`` in ``index``, each an id, a stored path, or a path naming the same file.

    A path is looked up as stored (``paths.json``), then as a file: relative to the working directory or
    absolute, compared with the file each stored path resolves to under the index's root; a string of digits
    that is neither is an id.

    Raises:
        BundleError: An item is in no form in the index (the message names the first such and counts them).
    """
    paths = index.paths
    by_path = {p: label for label, p in enumerate(paths) if p is not None}
    root = gallery_root(index)
    by_file = {resolve(root, p): label for p, label in by_path.items()} if root is not None else {}
    labels, missing = [], []
    for item in items:
        label = _label_of(item, paths, by_path, by_file)
        if label is None:
            missing.append(item)
        else:
            labels.append(label)
    if missing:
        where = str(getattr(index, "folder", None) or "the index")
        raise BundleError(f"{len(missing)} of the items to remove are not in {where}, e.g. {missing[0]!r}",
                          where=where, fix="name items by the id or a path `dmlplug search --json` shows for them "
                          "(`id`, `stored_path` or `path`), or as paths.json lists them")
    return labels


def _label_of(item: str | int, paths: Sequence[str | None], by_path: dict[str, int],
              by_file: dict[str, int]) -> int | None:
    if isinstance(item, int) and not isinstance(item, bool):
        return item if 0 <= item < len(paths) and paths[item] is not None else None
    text = str(item)
    if text in by_path:
        return by_path[text]
    label = by_file.get(os.path.normpath(os.path.abspath(text)))
    if label is None and text.isdigit():  # a line of an index-remove file that is an id, not a path
        return _label_of(int(text), paths, by_path, by_file)
    return label
