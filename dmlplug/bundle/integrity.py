"""Checking the files a bundle or an index loads: recorded size and sha256, hashed once per process.

``bundle.json`` records the model file's size and sha256, ``index.json`` those of the index's data files. A
file replaced by another run's, truncated by a copy or damaged on disk then fails here with one message that
names it, instead of loading (and answering searches with another model's vectors) or crashing in ONNX
Runtime or faiss. Hashing a model of a few hundred MiB takes a second, so digests are cached per process by
path, size, inode and modification and change times: loading the same bundle again does not hash it again,
while a file written anew, even with its old mtime restored (``cp -p``), has a new change time and is hashed
anew.
"""

from __future__ import annotations

import os
from pathlib import Path

from dmlplug.bundle.errors import BundleError
from dmlplug.files import sha256_file

#: ``(resolved path, size, inode, mtime_ns, ctime_ns) -> sha256`` of the files hashed by this process.
_DIGESTS: dict[tuple[str, int, int, int, int], str] = {}


def file_digest(path: Path) -> str:
    """SHA-256 of ``path``, computed once per process for each version of the file.

    Raises:
        OSError: The file cannot be read.
    """
    stat = os.stat(path)
    key = (str(Path(path).resolve()), stat.st_size, stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns)
    digest = _DIGESTS.get(key)
    if digest is None:
        digest = _DIGESTS[key] = sha256_file(path)
    return digest


def check_file(path: Path, *, size: int | None, sha256: str | None, what: str, record: str, fix: str) -> str:
    """Check that ``path`` is the file ``record`` describes; returns its sha256.

    Args:
        path: The file.
        size: Its recorded size in bytes (``None``: not recorded, not checked).
        sha256: Its recorded hex digest (``None``: not recorded, not checked).
        what: What the file is, for messages (``"the bundle's model file"``).
        record: Where size and digest are recorded, for messages (``"bundle.json"``).
        fix: How to get a good file.

    Raises:
        BundleError: The file is missing or unreadable, or its size or digest differs from the record.
    """
    if not path.is_file():
        raise BundleError(f"{what} {path.name} is missing", where=str(path), fix=fix)
    try:
        actual_size = path.stat().st_size
        if size is not None and actual_size != size:
            raise BundleError(f"{what} {path} has {actual_size} bytes where {record} records {size}: it was "
                              "truncated or replaced", where=str(path), fix=fix)
        digest = file_digest(path)
    except OSError as exc:
        raise BundleError(f"{what} {path} cannot be read: {exc.strerror or exc}", where=str(path), fix=fix) from None
    if sha256 is not None and digest != sha256:
        raise BundleError(f"{what} {path} is not the file {record} records: its sha256 is {digest[:16]}…, "
                          f"{record} records {sha256[:16]}… (damaged, or replaced by another file)",
                          where=str(path), fix=fix)
    return digest


def forget_digests() -> None:
    """Empty the per-process digest cache (for tests and long-lived services that replace files in place)."""
    _DIGESTS.clear()
