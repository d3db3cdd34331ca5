"""Download a dataset's files resumably, verify them, and extract them atomically.

The building blocks of ``dmlplug data download`` (the datasets plugin names the files; nothing here knows a
dataset):

* :func:`fetch` streams one URL into ``<file>.part`` with :mod:`urllib`, continues a partial ``.part`` with an
  HTTP ``Range`` request, checks the size and the MD5 / SHA-256 when they are known, and only then renames
  ``.part`` to the final name. An interrupted transfer keeps the ``.part`` file (the next call resumes it); a
  complete file whose checksum or size is wrong is deleted (resuming it cannot help).
* :func:`extract_atomic` unpacks ``.tgz`` / ``.tar.gz`` / ``.tar`` / ``.zip`` archives (and copies plain files)
  into a temporary folder beside the target, then renames the folder that holds the layout to the target's
  name: a crash leaves no half-extracted tree under the final name.

A progress bar (rich) is drawn on a terminal only. ``DMLPLUG_DATA_MIRROR`` (or ``mirror=``) replaces every
official URL by ``<mirror>/<file name>``.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import shutil
import sys
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

from dmlplug.errors import DataError

#: Environment variable naming a mirror: a base URL that serves every file under its own file name.
MIRROR_ENV = "DMLPLUG_DATA_MIRROR"

CHUNK = 1 << 20


@dataclass(frozen=True)
class RemoteFile:
    """One file of a dataset's download.

    Attributes:
        filename: Name of the file (and of the file under a mirror).
        url: Official URL, or ``None`` when no official source remains (a mirror is then the only way).
        md5: Expected hex MD5, or ``None`` when unknown.
        sha256: Expected hex SHA-256, or ``None`` when unknown. With neither checksum only the size is checked
            (when known), so a corrupt download shows when the archive is unpacked.
        size: Expected size in bytes, or ``None`` when unknown.
        extract: ``True``: an archive unpacked into the tree; ``False``: a file copied into the tree as it is.
    """

    filename: str
    url: str | None
    md5: str | None = None
    sha256: str | None = None
    size: int | None = None
    extract: bool = True


def mirror_from_env(mirror: str | None = None) -> str | None:
    """``mirror`` if given, else ``$DMLPLUG_DATA_MIRROR`` (``None`` when neither is set)."""
    return mirror or os.environ.get(MIRROR_ENV) or None


def source_url(remote: RemoteFile, mirror: str | None) -> str | None:
    """The URL ``remote`` is fetched from: ``<mirror>/<filename>`` with a mirror, else the official URL."""
    if mirror:
        return mirror.rstrip("/") + "/" + remote.filename
    return remote.url


def fetch(url: str, dest: Path, remote: RemoteFile, *, progress: bool | None = None, timeout: float = 60) -> Path:
    """Download ``url`` to ``dest`` through ``dest.part``, resuming a partial ``.part`` with a Range request.

    Args:
        url: Where to download from (http, https or file).
        dest: The final file; written only once the download is complete and verified.
        remote: What the file must be (size and checksums, each optional).
        progress: Draw a progress bar; ``None``: only when standard error is a terminal.
        timeout: Seconds a connection may stay silent.

    Returns:
        ``dest``.

    Raises:
        DataError: The server cannot be reached or answers with an error, the transfer stops early (the
            ``.part`` file is kept: the next call resumes it), or the complete file has the wrong size or
            checksum (the file is deleted).
    """
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "dmlplug", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        response = urlopen(Request(url, headers=headers), timeout=timeout)  # noqa: S310 (URLs come from the spec or the user)
    except HTTPError as exc:
        if exc.code == 416 and offset:  # the .part file is already complete: verify it below
            return _finish(part, dest, remote, url)
        raise DataError(f"downloading {url} failed: HTTP {exc.code} {exc.reason}", where=str(dest),
                        fix=f"check the URL, or use a mirror (--mirror URL or ${MIRROR_ENV})") from None
    except (URLError, OSError) as exc:
        raise _interrupted(url, part, exc) from None
    with response:
        status = getattr(response, "status", 200)
        resumed_at = response.headers.get("Content-Range", "").removeprefix("bytes ").split("-", 1)[0]
        if offset and status == 206 and resumed_at != str(offset):
            part.unlink()
            raise DataError(f"{url} answered the request for bytes {offset}- with another range", where=str(part),
                            fix="run the command again: the partial file was deleted, it starts afresh")
        if offset and status != 206:
            offset = 0  # the server ignored the Range request: start again from the first byte
        total = _total_size(response, offset)
        mode = "ab" if offset else "wb"
        try:
            with open(part, mode) as handle, _bar(dest.name, total, offset, progress) as advance:
                while block := response.read(CHUNK):
                    handle.write(block)
                    advance(len(block))
        except (OSError, http.client.HTTPException) as exc:  # a reset connection, a timeout, IncompleteRead
            raise _interrupted(url, part, exc) from None
    if total is not None and part.stat().st_size < total:
        raise _interrupted(url, part, f"the connection closed after {part.stat().st_size:,} of {total:,} bytes")
    return _finish(part, dest, remote, url)


def _interrupted(url: str, part: Path, reason: object) -> DataError:
    kept = part.stat().st_size if part.exists() else 0
    return DataError(f"downloading {url} stopped: {reason}", where=str(part),
                     fix=f"run the command again: it resumes from the {kept:,} bytes kept in {part.name}"
                     if kept else "check the network (or the mirror) and run the command again")


def _total_size(response: Any, offset: int) -> int | None:
    content_range = response.headers.get("Content-Range", "")
    if content_range and "/" in content_range and not content_range.endswith("/*"):
        return int(content_range.rsplit("/", 1)[1])
    length = response.headers.get("Content-Length")
    return int(length) + offset if length is not None else None


def _finish(part: Path, dest: Path, remote: RemoteFile, url: str) -> Path:
    """Check size and checksums of the complete ``part`` and rename it to ``dest``; delete it if wrong."""
    problem = verify_file(part, remote)
    if problem:
        part.unlink()
        raise DataError(f"{dest.name} from {url}: {problem}; the file was deleted", where=str(dest),
                        fix="run the command again to download it afresh; if it fails again, the source has "
                        f"changed or a proxy alters it: try a mirror (--mirror URL or ${MIRROR_ENV})")
    os.replace(part, dest)
    return dest


def verify_file(path: Path, remote: RemoteFile) -> str | None:
    """What is wrong with ``path`` against ``remote``'s size and checksums, or ``None`` when nothing is."""
    size = path.stat().st_size
    if remote.size is not None and size != remote.size:
        return f"size {size:,} bytes, expected {remote.size:,}"
    for name, expected in (("md5", remote.md5), ("sha256", remote.sha256)):
        if expected:
            digest = hashlib.new(name)
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(CHUNK), b""):
                    digest.update(block)
            if digest.hexdigest() != expected.lower():
                return f"{name} checksum mismatch (got {digest.hexdigest()}, expected {expected})"
    return None


@contextmanager
def _bar(name: str, total: int | None, done: int, progress: bool | None) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on a terminal (``progress=None``), or a silent counter."""
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(name, total=total, completed=done)
        yield lambda n: bar.advance(task, n)


def extract_atomic(files: list[Path], target: Path, *, inner: str | None = None) -> Path:
    """Unpack ``files`` into a temporary folder beside ``target``, then rename the layout folder to ``target``.

    Args:
        files: Archives (``.tgz``, ``.tar.gz``, ``.tar``, ``.zip``) to unpack, and plain files (any other
            suffix) to copy, all into the same temporary folder.
        target: The final folder; it must not exist yet.
        inner: The folder inside the archives that becomes ``target`` (e.g. ``"CUB_200_2011"``); ``None``: the
            temporary folder itself does.

    Returns:
        ``target``.

    Raises:
        DataError: An archive is corrupt or truncated, or unsafe (a member outside the folder), or ``inner``
            is not in it. Nothing is left under ``target``; the temporary folder is removed.
    """
    staging = target.with_name(f".{target.name}.extracting")
    if staging.exists():
        shutil.rmtree(staging)  # left over by an interrupted earlier run
    staging.mkdir(parents=True)
    try:
        for path in files:
            _unpack(path, staging)
        source = staging / inner if inner else staging
        if not source.is_dir():
            raise DataError(f"the archives hold no folder {inner!r}", where=", ".join(str(f) for f in files),
                            fix="the download is not the expected release; delete it and use the official file")
        os.rename(source, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return target


def _unpack(path: Path, into: Path) -> None:
    name = path.name.lower()
    try:
        if name.endswith((".tgz", ".tar.gz", ".tar")):
            with tarfile.open(path) as archive:
                archive.extractall(into, filter="data")  # refuses absolute paths, "..", devices and outside links
        elif name.endswith(".zip"):
            with zipfile.ZipFile(path) as archive:
                for member in archive.namelist():
                    if member.startswith(("/", "\\")) or ".." in Path(member).parts:
                        raise DataError(f"{path.name} holds an unsafe member {member!r}", where=str(path))
                archive.extractall(into)
        else:
            shutil.copy2(path, into / path.name)
    except (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, gzip.BadGzipFile) as exc:
        raise DataError(f"{path.name} is corrupt or truncated ({type(exc).__name__}: {exc})", where=str(path),
                        fix=f"delete {path} and run the command again to download it afresh") from None
