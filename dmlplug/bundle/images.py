"""Image folders: every image under a folder in a stable order, loaded with unreadable files reported."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmlplug.bundle.errors import BundleError
from dmlplug.data.image_files import IMAGE_EXTENSIONS


@dataclass
class Unreadable:
    """An image file that could not be decoded.

    Attributes:
        path: The file.
        reason: The decoder's message.
    """

    path: str
    reason: str


@dataclass
class LoadedBatch:
    """Images of one batch that could be decoded, with their paths, and the files that could not.

    Attributes:
        images: Decoded RGB ``PIL.Image.Image`` objects.
        paths: The path of each image in ``images``.
        failures: Files of the batch that could not be decoded.
    """

    images: list[Any] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    failures: list[Unreadable] = field(default_factory=list)


def list_images(folder: str | Path, *, what: str = "folder") -> list[str]:
    """Every image file under ``folder`` (recursively), sorted by path.

    Hidden files and folders are left out (macOS ``._*`` forks, ``.git``). Sorting the full paths makes the
    order, and so the rows of an embedding file or an index, independent of the file system.

    Args:
        folder: The folder.
        what: What the folder is, for messages ("query folder").

    Raises:
        BundleError: ``folder`` is not a folder, or holds no image.
    """
    root = Path(folder)
    if not root.is_dir():
        raise BundleError(f"{root} is not a folder", fix="give a folder of images")
    found: list[str] = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if not d.startswith(".")]
        found.extend(os.path.join(directory, f) for f in files
                     if not f.startswith(".") and f.lower().endswith(IMAGE_EXTENSIONS))
    if not found:
        raise BundleError(f"no image file under the {what} {root} (searched recursively)", where=str(root),
                          fix=f"put images ({', '.join(IMAGE_EXTENSIONS)}) in the {what}")
    return sorted(found)


def load_image(path: str | Path) -> Any:
    """Decode ``path`` as an RGB ``PIL.Image.Image`` (fully loaded, so a truncated file fails here)."""
    from PIL import Image

    with Image.open(path) as image:
        return image.convert("RGB")


def load_batches(paths: Sequence[str], batch_size: int, *, strict: bool = False) -> Iterator[LoadedBatch]:
    """Decode ``paths`` in batches of ``batch_size``, in order.

    Args:
        paths: Image files.
        batch_size: Files per batch (a batch may hold fewer images when some cannot be decoded).
        strict: Raise at the first unreadable file instead of reporting it in the batch's ``failures``.

    Raises:
        BundleError: With ``strict``, a file cannot be decoded.
    """
    for start in range(0, len(paths), batch_size):
        batch = LoadedBatch()
        for path in paths[start:start + batch_size]:
            try:
                batch.images.append(load_image(path))
            except Exception as exc:  # any decoder failure: truncated, unknown format, vanished, a folder
                if strict:
                    raise BundleError(f"cannot read image {path}: {type(exc).__name__}: {exc}", where=str(path),
                                      fix="replace or remove the file, or leave out --strict to skip it") from None
                batch.failures.append(Unreadable(str(path), f"{type(exc).__name__}: {exc}"))
                continue
            batch.paths.append(str(path))
        yield batch


def describe_failures(failures: Iterable[Unreadable], shown: int = 10) -> list[str]:
    """One line per unreadable file (the first ``shown``), then a count of the rest."""
    failures = list(failures)
    lines = [f"skipped unreadable image {f.path}: {f.reason}" for f in failures[:shown]]
    if len(failures) > shown:
        lines.append(f"... and {len(failures) - shown} more unreadable images")
    return lines
