"""Are a dataset's image files usable? The cheap check every run makes, and the deep one of ``dmlplug data check``.

**Cheap** (:func:`cheap_problem`; every file dataset, when it is built with ``check_files = true``, so before a run's
initial evaluation): the file exists, is a regular file, is not empty, can be opened and read, and starts as an image
does: the signature of JPEG, PNG, GIF, BMP, TIFF, WebP or PPM/PGM, else whatever Pillow identifies from the header
without decoding the pixels. A PNG must also end with its ``IEND`` chunk, so a PNG cut short (a partial download or
copy) is found too. One ``open`` and two small reads per file, on a thread pool (network file systems answer many
requests at once); no pixel is decoded. A JPEG cut short is *not* found: many valid JPEGs carry data after their end
marker (motion photos append a video), so its end says nothing; decoding does.

**Deep** (:func:`deep_problem`; ``dmlplug data check --deep``): the cheap check, then Pillow decodes every pixel
(``Image.load``), which finds truncated and corrupt files of every format.

Every problem is ``(path, reason)``; :func:`scan` returns all of them, so a report names every bad file at once.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dmlplug.errors import DataError

log = logging.getLogger("dmlplug.data")

#: Leading bytes of the image formats dmlplug's loaders meet (WebP: ``RIFF....WEBP``, checked apart).
SIGNATURES = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM", b"II*\x00", b"MM\x00*",
              b"P5", b"P6", b"P2", b"P3")
_PNG = b"\x89PNG\r\n\x1a\n"
#: The last 12 bytes of every complete PNG: the empty ``IEND`` chunk (length 0, type, CRC).
_PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"
#: Files checked one by one below this count; above it, on a thread pool of :data:`THREADS`.
_POOL_FROM, THREADS = 256, 16
#: How many bad files a run's error names before it only counts them.
SHOWN = 10

Problem = tuple[str, str]


def cheap_problem(path: str) -> str | None:
    """What makes ``path`` unusable as an image without decoding it, or ``None`` (see the module docstring)."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        if info.st_size == 0:
            return "empty file (0 bytes)"
        with open(path, "rb") as handle:
            head = handle.read(16)
            tail = b""
            if head.startswith(_PNG):
                handle.seek(max(0, info.st_size - len(_PNG_END)))
                tail = handle.read()
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    if head.startswith(_PNG):
        return None if tail == _PNG_END else "truncated PNG (it does not end with the IEND chunk)"
    if head.startswith(SIGNATURES) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP"):
        return None
    return _pillow_identifies(path, head)


def _pillow_identifies(path: str, head: bytes) -> str | None:
    # A format beyond the usual ones (JPEG 2000, ICO ...): Pillow reads its header, lazily, without the pixels.
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path):
            return None
    except UnidentifiedImageError:
        return f"not an image (it starts with {head[:10]!r})"
    except Exception as exc:  # noqa: BLE001 (a header Pillow cannot read is the problem to report)
        return f"unreadable image header: {type(exc).__name__}: {exc}"


def deep_problem(path: str) -> str | None:
    """The cheap check, then every pixel decoded by Pillow; what failed, or ``None``."""
    problem = cheap_problem(path)
    if problem is not None:
        return problem
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.load()  # decodes every pixel: a truncated file raises here
    except Exception as exc:  # noqa: BLE001 (any decoder failure means the file is unusable)
        return f"does not decode: {type(exc).__name__}: {exc}"
    return None


def scan(paths: Sequence[str], *, deep: bool = False) -> list[Problem]:
    """``(path, reason)`` of every file of ``paths`` that fails the cheap (or, ``deep``, the deep) check, in order."""
    check: Callable[[str], str | None] = deep_problem if deep else cheap_problem
    if len(paths) < _POOL_FROM:
        reasons: Iterable[str | None] = map(check, paths)
        return [(p, r) for p, r in zip(paths, reasons, strict=True) if r is not None]
    with ThreadPoolExecutor(THREADS, thread_name_prefix="dmlplug-file-check") as pool:
        reasons = list(pool.map(check, paths, chunksize=64))
    return [(p, r) for p, r in zip(paths, reasons, strict=True) if r is not None]


def source_paths(sources: Iterable[Any]) -> list[str]:
    """The distinct file paths of the sources that have them (``FileImageSource.paths``), in order."""
    return list(dict.fromkeys(p for source in sources if source is not None for p in getattr(source, "paths", ())))


def check_sources(dataset: str, sources: Iterable[Any], *, decode_errors: str) -> None:
    """The cheap check of every file of ``sources`` as a dataset is built: fail, or warn under ``"skip"``.

    Raises:
        DataError: Some files fail and ``decode_errors`` is ``"fail"``; the message names the first
            :data:`SHOWN` with their reasons and counts them all.
    """
    paths = source_paths(sources)
    bad = scan(paths)
    if not bad:
        return
    listing = "\n".join(f"    {path}: {reason}" for path, reason in bad[:SHOWN])
    more = f"\n    ... and {len(bad) - SHOWN:,} more" if len(bad) > SHOWN else ""
    what = f"{dataset}: {len(bad):,} of {len(paths):,} image files are not usable images:\n{listing}{more}"
    if decode_errors == "skip":
        log.warning("%s\n(decode_errors = \"skip\": another image of the same class is served in their place)", what)
        return
    raise DataError(what, where="[data.dataset]",
                    fix="replace or remove them (`dmlplug data check <recipe> --deep` names every bad file, each "
                        "decoded), or set decode_errors = \"skip\" in [data.dataset] to serve another image of the "
                        "same class instead")
