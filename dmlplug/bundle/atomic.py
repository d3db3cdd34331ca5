"""Writing a whole folder atomically: build it beside its destination, then rename it into place."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dmlplug.bundle.errors import BundleError


@contextmanager
def atomic_folder(out: str | Path, what: str) -> Iterator[Path]:
    """Yield a temporary folder that becomes ``out`` when the block ends without an error.

    The folder is made next to ``out`` (same file system, so the final rename is atomic) and removed on any
    error, so a failed export or index leaves nothing behind, and a reader never sees half a folder.

    Args:
        out: The destination; it must not exist, or be an empty folder.
        what: What is written (``"bundle"``), for messages.

    Raises:
        BundleError: ``out`` exists and is not an empty folder.
    """
    out = Path(out)
    check_destination(out, what)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; give the folder a plain mkdir's mode
        if out.is_dir():
            out.rmdir()  # empty (checked above); rename cannot replace a folder on every system
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def check_destination(out: Path, what: str) -> None:
    """Refuse an ``out`` that exists and is not an empty folder (call it early, before slow work).

    Raises:
        BundleError: ``out`` exists and is not an empty folder.
    """
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BundleError(f"{out} already exists and is not an empty folder", where=str(out),
                          fix=f"give a new folder for the {what}, or remove the old one")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def replace_folder(folder: Path, write: Callable[[Path], None]) -> None:
    """Replace the existing ``folder`` by a new one that ``write`` fills, swapping it in by two renames.

    The new folder is written beside the old one; an error while writing removes it and leaves the old folder
    as it was. Then the old folder is renamed aside, the new one renamed into place and the old one removed:
    a reader sees the old folder or the new one (or, between the two renames, none), never a mix.

    Args:
        folder: The folder to replace.
        write: Fills the new (empty) folder it is given.
    """
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".new", dir=folder.parent))
    try:
        write(tmp)
        os.chmod(tmp, 0o777 & ~_umask())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".old", dir=folder.parent))
    os.rmdir(old)  # a fresh name only: rename needs it absent
    os.replace(folder, old)
    os.replace(tmp, folder)
    shutil.rmtree(old, ignore_errors=True)
