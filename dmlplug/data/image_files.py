"""Images stored as files on disk: :class:`FileImageSource` and the checks around it.

Numpy and Pillow only (Pillow imported when an image is decoded), so dataset plugins stay import-light.

A benchmark copy can be incomplete (a partial download) or contain a few corrupt files. Both are found
early: listed-but-absent files when the source is built, and undecodable files the first time they are
read, under the ``decode_errors`` policy:

* ``"fail"``: raise :class:`~dmlplug.errors.DataError` naming the file;
* ``"skip"``: log a warning once per file and serve another image of the same class instead.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from dmlplug.data.base import ImageSource
from dmlplug.errors import DataError

log = logging.getLogger("dmlplug.data")

#: A raw class key of :meth:`FileImageSource.from_class_keys` (a class id, a folder name ...).
K = TypeVar("K", bound=Hashable)

DECODE_POLICIES = ("fail", "skip")

#: File name suffixes treated as images when a folder is listed (compared in lower case).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")

#: How many missing paths a :class:`DataError` quotes before it only gives the count.
MISSING_SHOWN = 5


class FileImageSource(ImageSource):
    """Labelled image files.

    Args:
        paths: One file path per image.
        labels: Dense class index per image (``0 .. len(class_names)-1``).
        class_names: Original class name of every label.
        name: Split name used in messages (``"cub200/train"``).
        decode_errors: ``"fail"`` or ``"skip"`` (see the module docstring).
        attributes: Extra per-image arrays kept aligned with the images through :meth:`select`
            (e.g. ``{"super_labels": ...}`` for Stanford Online Products).
        check_files: Verify at construction that every file exists.

    Raises:
        DataError: ``check_files`` is set and some listed files do not exist (the message quotes the
            first few and gives the count).

    Attributes:
        skipped: Number of distinct files that failed to decode and were substituted, in this
            process (each DataLoader worker keeps its own count).
    """

    def __init__(
        self,
        paths: Sequence[str | os.PathLike[str]],
        labels: Iterable[int],
        class_names: Sequence[str],
        *,
        name: str = "",
        decode_errors: str = "fail",
        attributes: dict[str, np.ndarray] | None = None,
        check_files: bool = True,
    ):
        if decode_errors not in DECODE_POLICIES:
            raise ValueError(f"decode_errors must be one of {DECODE_POLICIES}, got {decode_errors!r}")
        # Plain strings pickle small and fast to DataLoader workers (hundreds of thousands for iNat).
        self.paths = [os.fspath(p) for p in paths]
        self.labels = np.asarray(list(labels) if not isinstance(labels, np.ndarray) else labels, dtype=np.int64)
        self.class_names = [str(c) for c in class_names]
        self.name = name
        self.decode_errors = decode_errors
        self.attributes = {k: np.asarray(v) for k, v in (attributes or {}).items()}
        if len(self.paths) != len(self.labels):
            raise ValueError(f"{len(self.paths)} paths but {len(self.labels)} labels")
        for key, values in self.attributes.items():
            if len(values) != len(self.paths):
                raise ValueError(f"attribute {key!r} has {len(values)} values for {len(self.paths)} images")
        if len(self.labels) and (self.labels.min() < 0 or self.labels.max() >= len(self.class_names)):
            raise ValueError("labels must index class_names")
        self._bad: set[int] = set()
        self._substitutes: dict[int, int] = {}
        self._members: dict[int, np.ndarray] | None = None
        if check_files:
            raise_if_missing(self.paths, where=name)

    @classmethod
    def from_class_keys(
        cls,
        paths: Sequence[str | os.PathLike[str]],
        keys: Sequence[K],
        class_order: Sequence[K] | None = None,
        class_names: Mapping[K, str] | None = None,
        **options: Any,
    ) -> FileImageSource:
        """Build a source from one raw class key per image (a class id, a folder name ...).

        Args:
            paths: One file path per image.
            keys: The raw class key of every image.
            class_order: Order of the classes (label ``i`` is ``class_order[i]``); defaults to the sorted
                distinct keys. Keys absent from ``keys`` are dropped.
            class_names: Display name per key; defaults to ``str(key)``.
            **options: Passed to the constructor (``name``, ``decode_errors`` ...).
        """
        present = set(keys)
        order = (
            [k for k in class_order if k in present] if class_order is not None
            else sorted(present)  # type: ignore[type-var]  # sortable without class_order (documented)
        )
        index = {k: i for i, k in enumerate(order)}
        names = [(class_names or {}).get(k, str(k)) for k in order]
        return cls(paths, np.fromiter((index[k] for k in keys), np.int64, len(keys)), names, **options)

    def load_image(self, index: int) -> Any:
        """Return image ``index`` as an RGB ``PIL.Image.Image``, applying the decode policy.

        Raises:
            DataError: The file cannot be decoded and the policy is ``"fail"``, or it is ``"skip"`` and
                no image of the same class can be decoded.
        """
        return self._load(int(index), decode_image)

    def load_tensor(self, index: int) -> Any:
        """Return image ``index`` as a ``3×H×W`` uint8 RGB tensor, applying the decode policy.

        The fast path of the training and evaluation loaders (see :func:`decode_image_tensor`): the same
        pixels as :meth:`load_image`, decoded by ``torchvision.io`` where it can.

        Raises:
            DataError: As :meth:`load_image`, with the same message.
        """
        return self._load(int(index), decode_image_tensor)

    def _load(self, index: int, decoder: Callable[[str], Any]) -> Any:
        target = self._substitutes.get(index, index)
        try:
            return decoder(self.paths[target])
        except Exception as exc:  # any decoder failure (truncated, unknown format, vanished file)
            if self.decode_errors == "fail":
                raise DataError(
                    f"cannot decode image {self.paths[target]}: {type(exc).__name__}: {exc}",
                    where=self.name or None,
                    fix="replace the file, or set decode_errors = \"skip\" in [data.dataset] to serve "
                    "another image of the same class instead",
                ) from None
            return self._substitute(index, target, exc, decoder)

    def _substitute(self, index: int, failed: int, exc: Exception, decoder: Callable[[str], Any]) -> Any:
        """Serve the next decodable image of the same class (deterministic, cyclic order)."""
        self._mark_bad(failed, exc)
        label = int(self.labels[index])
        members = self._class_members()[label]
        start = int(np.searchsorted(members, failed))
        for offset in range(1, len(members) + 1):
            candidate = int(members[(start + offset) % len(members)])
            if candidate in self._bad:
                continue
            try:
                image = decoder(self.paths[candidate])
            except Exception as next_exc:
                self._mark_bad(candidate, next_exc)
                continue
            self._substitutes[index] = candidate
            return image
        raise DataError(
            f"no image of class {self.class_names[label]!r} can be decoded "
            f"({len(members)} files, e.g. {self.paths[failed]})",
            where=self.name or None,
            fix="check the image files of this class",
        )

    def _mark_bad(self, index: int, exc: Exception) -> None:
        if index not in self._bad:
            self._bad.add(index)
            log.warning("skipping undecodable image %s (%s: %s); serving another image of its class",
                        self.paths[index], type(exc).__name__, exc)

    def _class_members(self) -> dict[int, np.ndarray]:
        if self._members is None:
            order = np.argsort(self.labels, kind="stable")
            bounds = np.flatnonzero(np.diff(self.labels[order])) + 1
            self._members = {int(self.labels[g[0]]): g for g in np.split(order, bounds) if len(g)}
        return self._members

    @property
    def skipped(self) -> int:
        """Number of distinct undecodable files met so far in this process."""
        return len(self._bad)

    def describe(self, index: int) -> str:
        """The file path of image ``index``."""
        return self.paths[int(index)]

    def select(self, indices: Iterable[int], name: str | None = None) -> FileImageSource:
        """Some of the images as a new source, labels re-indexed ``0 .. C'-1`` in class order.

        Unlike :meth:`subset` the result is again a :class:`FileImageSource`, with its attributes and
        decode policy, and without re-checking that the files exist.
        """
        indices = np.asarray(list(indices) if not isinstance(indices, np.ndarray) else indices, dtype=np.int64)
        kept = np.unique(self.labels[indices])
        remap = np.full(len(self.class_names), -1, dtype=np.int64)
        remap[kept] = np.arange(len(kept))
        return FileImageSource(
            [self.paths[i] for i in indices],
            remap[self.labels[indices]],
            [self.class_names[c] for c in kept],
            name=name or f"{self.name}[subset]",
            decode_errors=self.decode_errors,
            attributes={k: v[indices] for k, v in self.attributes.items()},
            check_files=False,
        )


def decode_image(path: str) -> Any:
    """Open ``path`` and return it fully decoded as an RGB ``PIL.Image.Image``.

    CUB and SOP contain greyscale and CMYK files; everything is converted to RGB here. ``convert``
    forces the pixel data to load, so a truncated file fails now, not later inside a transform.
    """
    from PIL import Image

    with Image.open(path) as image:
        return image.convert("RGB")


#: Leading bytes of the formats decoded by ``torchvision.io`` (libjpeg-turbo, libpng); every other format
#: (BMP, TIFF, PPM, GIF — whose animations torchvision returns as frame stacks — ...) goes through Pillow.
_TORCHVISION_SIGNATURES = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n")


def decode_image_tensor(path: str) -> Any:
    """Open ``path`` and return it decoded as a ``3×H×W`` uint8 RGB tensor.

    JPEG and 8-bit PNG files are decoded by ``torchvision.io.decode_image`` (``ImageReadMode.RGB``): 1.3×
    faster per image than Pillow plus the conversion to a tensor (``benchmarks/data_throughput.py``) and,
    as the tests check, the same pixels as :func:`decode_image`: greyscale and CMYK become RGB, an alpha
    channel is dropped without compositing, and EXIF orientation is ignored on both paths. Anything
    torchvision does not decode (other formats, 16-bit PNG, a corrupt or truncated file) is decoded by
    :func:`decode_image` instead, so a broken file raises Pillow's error exactly as :func:`decode_image` does.
    """
    import torch

    with open(path, "rb") as handle:
        data = handle.read()
    if data.startswith(_TORCHVISION_SIGNATURES):
        tensor = _torchvision_decode(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        if tensor is not None and tensor.dtype == torch.uint8 and tensor.dim() == 3 and tensor.shape[0] == 3:
            return tensor
    return torch.from_numpy(np.array(decode_image(path))).permute(2, 0, 1).contiguous()


def _torchvision_decode(data: Any) -> Any:
    """``torchvision.io.decode_image(data, RGB)``, or None where it is missing or fails."""
    import warnings

    try:
        from torchvision.io import ImageReadMode
        from torchvision.io import decode_image as tv_decode
    except ImportError:  # torchvision builds without image.so, or a version that removed the decoders
        return None
    with warnings.catch_warnings():
        # torchvision 0.29 deprecates its decoders in favour of TorchCodec and warns on every call.
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return tv_decode(data, mode=ImageReadMode.RGB)
        except RuntimeError:  # corrupt or unsupported: Pillow decides and words the error
            return None


def find_missing(paths: Iterable[str]) -> list[str]:
    """The paths that do not name an existing file, in input order.

    Lists each parent directory once instead of calling ``stat`` per file, which matters on network
    file systems with hundreds of thousands of images.
    """
    by_dir: dict[str, set[str] | None] = {}
    missing = []
    for path in paths:
        parent, base = os.path.split(path)
        if parent not in by_dir:
            try:
                by_dir[parent] = {e.name for e in os.scandir(parent or ".") if not e.is_dir()}
            except OSError:
                by_dir[parent] = None
        names = by_dir[parent]
        if names is None or base not in names:
            missing.append(path)
    return missing


def raise_if_missing(paths: Sequence[str], *, where: str = "") -> None:
    """Raise a :class:`DataError` quoting the first missing files and their count, if any is missing."""
    missing = find_missing(paths)
    if not missing:
        return
    shown = "\n".join(f"    {p}" for p in missing[:MISSING_SHOWN])
    more = f"\n    ... and {len(missing) - MISSING_SHOWN} more" if len(missing) > MISSING_SHOWN else ""
    raise DataError(
        f"{len(missing)} of {len(paths)} listed image files do not exist:\n{shown}{more}",
        where=where or None,
        fix="complete the dataset copy (re-extract the archive), or point root at the full copy",
    )


def list_image_files(directory: str | os.PathLike[str]) -> list[str]:
    """Image files directly inside ``directory``, sorted by name.

    Hidden files are left out, among them the ``._*`` resource forks macOS leaves in archives.
    """
    with os.scandir(directory) as entries:
        files = [
            e.path for e in entries
            if e.is_file() and not e.name.startswith(".") and e.name.lower().endswith(IMAGE_EXTENSIONS)
        ]
    return sorted(files)


def list_class_folders(directory: str | os.PathLike[str]) -> list[str]:
    """Names of the visible sub-directories of ``directory``, sorted (one per class)."""
    with os.scandir(directory) as entries:
        return sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))
