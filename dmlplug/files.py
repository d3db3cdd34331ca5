"""Atomic file writes (a temporary file in the same folder, then rename) and file digests.

A crash or a full disk while writing leaves the previous file intact, never a truncated one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> Path:
    """Write ``path`` through ``write(fileobj)`` atomically (what ``write`` returns is ignored); returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp creates 0600; give the file the mode a plain open() would (0666 less the umask), so every
        # file of a run directory, last.pt and best.pt alike, shares one mode.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def free_for(directory: Path, manifest: str) -> bool:
    """Whether ``directory`` may become a new directory whose ``manifest`` file marks what it holds.

    True when it does not exist or holds nothing but the manifest's own temporary files: another process may be
    writing that manifest right now (workers starting together on one new directory), so those files do not
    make the directory someone else's. Commands that own a directory write their manifest first, so a directory
    with anything else in it and no manifest is not theirs.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return not directory.exists()
    pending = (f".{manifest}.", ".tmp")
    return all(p.name.startswith(pending[0]) and p.name.endswith(pending[1]) for p in directory.iterdir())


def claim_directory(directory: Path, manifest: str, fields: Mapping[str, Any], *, what: str, option: str,
                    compare: Mapping[str, str], legacy: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """Check that a command may work in ``directory``: new, empty, or made earlier by the same work.

    The one rule of the commands that own a directory (a tune search, a sweep, an ooDML sweep): they write their
    manifest first, and run again on the directory they continue only what they began. The caller writes its
    manifest after this check.

    Args:
        directory: The directory the command was given.
        manifest: The manifest's file name in it (``tune.json`` …).
        fields: The manifest the command would write now.
        what: What the directory holds, for messages (``"tune search"``, ``"sweep"``).
        option: The option that named the directory (``"--dir"``, ``"--out"``).
        compare: ``key -> what it stands for``: the keys whose values must equal the existing manifest's
            (``{"identity": "space, recipe or --set overrides"}``).
        legacy: Values a manifest written by an older version lacks (compared as if written).

    Returns:
        The existing manifest, or ``None`` when the directory is new or empty.

    Raises:
        RunError: The directory holds other work (a compared value differs) or something else (not empty and no
            manifest).
    """
    from dmlplug.errors import RunError

    directory = Path(directory)
    path = directory / manifest
    if path.is_file():
        existing = {**(legacy or {}), **json.loads(path.read_text(encoding="utf-8"))}
        for key, label in compare.items():
            if existing.get(key) != fields.get(key):
                raise RunError(f"the {what} directory {directory} was made with a different {label}", where=str(path),
                               fix=f"use a new {option} for another {what}, or rerun with the original inputs")
        return existing
    if not free_for(directory, manifest):
        raise RunError(f"{directory} exists, is not empty and is not a {what} directory (no {manifest})",
                       where=option, fix="choose a new or empty directory")
    return None


def withdraw(directory: Path, names: list[str]) -> None:
    """Remove the files ``names`` a command just wrote into a directory that was new, and the directory if empty.

    For a command that claimed a new directory (its manifest first) and then failed before doing anything in it:
    the directory must not go on naming a study or search that never started. Anything else in it stays.
    """
    directory = Path(directory)
    for name in names:
        (directory / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty (another worker's files) or already gone
        directory.rmdir()


def _umask() -> int:
    # Linux shows the umask in /proc; elsewhere os.umask can only read it by setting it (set back at once).
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(path: Path, text: str) -> Path:
    """Atomically write UTF-8 text."""
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def write_json(path: Path, data: Any) -> Path:
    """Atomically write pretty-printed JSON."""
    return write_text(path, json.dumps(data, indent=2, sort_keys=False, default=_jsonable) + "\n")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def sha256_file(path: str | Path, length: int | None = None) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks (of its first ``length`` bytes when given)."""
    digest = hashlib.sha256()
    left = -1 if length is None else length
    with open(path, "rb") as handle:
        while left:
            block = handle.read(1 << 20 if left < 0 else min(left, 1 << 20))
            if not block:
                break
            digest.update(block)
            left = left - len(block) if left > 0 else left
    return digest.hexdigest()
