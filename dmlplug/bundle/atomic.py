"""Writing a whole folder atomically: build it beside its destination, then rename it into place."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
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
    """Replace the existing ``folder`` by a new one that ``write`` fills, swapped in atomically.

    The new folder is written (and flushed to disk) beside the old one; an error while writing removes it and
    leaves the old folder as it was. Then the two are exchanged in one step (Linux's ``renameat2`` with
    ``RENAME_EXCHANGE``), so a reader, or a process killed at any moment, finds the old folder or the new one,
    never a mix and never none; the old one is then removed. Where the exchange is not available (another
    system, a file system without it) two renames do it, and a crash between them leaves the complete folders
    aside, which :func:`recover_folder` puts back.

    Args:
        folder: The folder to replace.
        write: Fills the new (empty) folder it is given.
    """
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=NEW_SUFFIX, dir=folder.parent))
    try:
        write(tmp)
        _sync_folder(tmp)
        os.chmod(tmp, 0o777 & ~_umask())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if _exchange(tmp, folder):
        shutil.rmtree(tmp, ignore_errors=True)  # now the old folder
        return
    old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=OLD_SUFFIX, dir=folder.parent))
    os.rmdir(old)  # a fresh name only: rename needs it absent
    os.replace(folder, old)
    os.replace(tmp, folder)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def folder_lock(folder: Path, *, shared: bool) -> Iterator[None]:
    """Hold the lock of ``folder`` across processes: shared for readers, exclusive for a writer.

    A lock file beside the folder (``.NAME.lock``; the folder itself is replaced by writers) serialises the
    writers of an index (``dmlplug index-add`` / ``index-remove``, a server's workers) and lets a reader read
    every file of one version. Advisory (``flock``): only processes that ask for it wait.
    """
    import fcntl

    with open(folder.parent / f".{folder.name}.lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


#: Suffixes of the folders :func:`replace_folder` writes beside the one it replaces.
NEW_SUFFIX, OLD_SUFFIX = ".new", ".old"


def recover_folder(folder: Path) -> bool:
    """Put back a ``folder`` that a crash between the two renames of :func:`replace_folder` left missing.

    Such a crash leaves the old folder renamed aside (complete) and the new one written beside it (complete):
    the new one is put in place, as the writer intended (else the old one). Returns whether a folder was put
    back; does nothing while ``folder`` exists.
    """
    if folder.exists():
        return False
    for suffix in (NEW_SUFFIX, OLD_SUFFIX):
        candidates = sorted(folder.parent.glob(f".{folder.name}.*{suffix}"), key=lambda p: p.stat().st_mtime_ns)
        if candidates:
            with suppress(OSError):  # another process recovered it first: the folder is there now
                os.rename(candidates[-1], folder)
            return True
    return False


def _sync_folder(folder: Path) -> None:
    """Flush the files of ``folder`` and the folder itself to disk, so the swap never publishes empty files."""
    for path in folder.iterdir():
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: ``renameat2``'s flag that swaps two paths atomically (linux/fs.h).
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths ``a`` and ``b`` atomically; ``False`` where the system cannot (nothing is changed then)."""
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):  # no libc by that name, or a glibc older than 2.28
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0
