"""``dmlplug data download`` and ``dmlplug data check``: the work behind the commands of :mod:`.commands`.

:func:`download` fetches a :class:`~dmlplug_builtins.datasets.sources.DownloadSpec`'s files into the data root
(resumable, verified: :mod:`dmlplug.data.download`), unpacks them atomically into the folder the loader reads and
deletes the archives. :func:`check` builds the dataset with its registered loader (``check_files`` off) and
compares the tree with the spec's counts, naming missing and (with ``deep``) undecodable images.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmlplug.data.download import extract_atomic, fetch, mirror_from_env, source_url
from dmlplug.errors import DataError
from dmlplug_builtins.datasets.sources import SPECS, DownloadSpec

Echo = Callable[[str], object]

#: How many missing or corrupt files a report names before it only counts them.
SHOW = 10


def download(spec: DownloadSpec, root: Path, *, mirror: str | None = None, keep_archives: bool = False,
             progress: bool | None = None, echo: Echo = print) -> Path:
    """Download, verify and unpack ``spec``'s files so that ``root / spec.folder`` is the loader's tree.

    Args:
        spec: The dataset's files and layout.
        root: The data root (``$DMLPLUG_DATA``); archives are downloaded into it.
        mirror: Base URL serving every file under its own name (default: ``$DMLPLUG_DATA_MIRROR``).
        keep_archives: Keep the archives after unpacking (default: delete them).
        progress: Progress bars; ``None``: on a terminal only.
        echo: Where progress messages go.

    Returns:
        The dataset's folder.

    Raises:
        DataError: A file has no official source and no mirror is given (the message lists the manual steps),
            a download fails or does not verify, an archive is corrupt, or files that no download provides
            are missing (with the steps to add them).
    """
    target = root / spec.folder
    if target.exists():
        echo(f"{spec.name}: {target} is present; nothing downloaded "
             f"(`dmlplug data check {spec.name} --root {root}` compares it with the official counts)")
        _require_extra_files(spec, target)
        return target
    mirror = mirror_from_env(mirror)
    urls = [source_url(remote, mirror) for remote in spec.files]
    if any(url is None for url in urls):
        raise DataError(f"{spec.name}: no official download of {spec.name} remains ({spec.source})",
                        where=str(target),
                        fix=(spec.manual or "download it by hand (docs/datasets/README.md)").replace("<root>",
                                                                                                  str(root)))
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for remote, url in zip(spec.files, urls, strict=True):
        assert url is not None
        dest = root / remote.filename
        if dest.exists():  # only a complete, verified download gets its final name
            echo(f"{spec.name}: {remote.filename} was downloaded before; not downloading it again")
        else:
            echo(f"{spec.name}: downloading {url}")
            fetch(url, dest, remote, progress=progress)
        paths.append(dest)
    echo(f"{spec.name}: unpacking into {target}")
    try:
        extract_atomic(paths, target, inner=spec.inner)
    except DataError as exc:
        # A corrupt archive cannot be resumed; delete it so the next run downloads it afresh.
        for path in paths:
            if str(path) == exc.where:
                path.unlink(missing_ok=True)
                raise DataError(f"{exc.what}; the file was deleted", where=exc.where,
                                fix="run the command again to download it afresh; if it is corrupt again, try "
                                "a mirror (--mirror URL)") from None
        raise
    if not keep_archives:
        for path in paths:
            path.unlink(missing_ok=True)
    echo(f"{spec.name}: ready at {target}")
    _require_extra_files(spec, target)
    return target


def download_into(name: str, root: str, *, quiet: bool = False) -> Path:
    """``[data.dataset] download = true``: make ``root`` (the dataset's own folder) exist, downloading it if needed.

    ``root`` is expanded like the loaders expand it; its parent is the data root the download goes into, and its
    last folder must be the one the download creates (``.../CUB_200_2011``). Progress goes to standard error
    unless ``quiet``.

    Raises:
        DataError: ``root``'s last folder is not the dataset's folder, or the download fails (see :func:`download`).
    """
    import sys

    spec = SPECS[name]
    folder = Path(os.path.expanduser(os.path.expandvars(root)))
    if "$" in str(folder):
        raise DataError(f"{name}: download = true, but root {root!r} names an environment variable that is not set",
                        where="[data.dataset] root", fix="set it (e.g. DMLPLUG_DATA) or give root as a path")
    if folder.is_dir():
        return folder
    if folder.name != spec.folder:
        raise DataError(f"{name}: download = true unpacks into a folder named {spec.folder!r}, but root is {folder}",
                        where="[data.dataset] root",
                        fix=f"set root = \"{folder.parent / spec.folder}\" (or any <data folder>/{spec.folder})")

    def echo(message: str) -> None:
        if not quiet:
            print(message, file=sys.stderr, flush=True)

    return download(spec, folder.parent, progress=None if not quiet else False, echo=echo)


def _require_extra_files(spec: DownloadSpec, target: Path) -> None:
    missing = [name for name in spec.extra_files if not (target / name).is_file()]
    if missing:
        raise DataError(f"{spec.name}: {', '.join(missing)} missing under {target}, and no download provides "
                        "them", where=str(target), fix=(spec.extra_steps or "").replace("<root>", str(target.parent)))


@dataclass
class CheckReport:
    """What :func:`check` found: counts, missing and corrupt files, problems (empty: the tree is complete)."""

    counts: dict[str, int] = field(default_factory=dict)
    expected: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is missing, corrupt or off count."""
        return not self.problems


def check(spec: DownloadSpec, root: Path, *, deep: bool = False, dataset_params: dict[str, Any] | None = None,
          echo: Echo = print) -> CheckReport:
    """Compare ``root / spec.folder`` with the official counts of ``spec``; list missing and corrupt images.

    Args:
        spec: The dataset and its expected counts (``spec.expected``).
        root: The data root.
        deep: Also decode every image (slow) and name those that do not decode or are truncated.
        dataset_params: Extra loader parameters (e.g. a ``layout``).
        echo: Where the report goes.

    Returns:
        The report; ``report.ok`` is false when anything differs.

    Raises:
        DataError: The loader cannot read the tree at all (a missing annotation file: its own message).
    """
    import dmlplug

    folder = root / spec.folder
    bundle = dmlplug.create("dataset", spec.name, root=str(folder), check_files=False, **(dataset_params or {}))
    report = CheckReport(expected=dict(spec.expected))
    report.counts = {
        "images": len(bundle.train) + len(bundle.test),
        "classes": bundle.train.num_classes + bundle.test.num_classes,
        "train_images": len(bundle.train), "train_classes": bundle.train.num_classes,
        "test_images": len(bundle.test), "test_classes": bundle.test.num_classes,
    }
    for key, want in spec.expected.items():
        got = report.counts[key]
        if got != want:
            report.problems.append(f"{key}: {got:,} (official: {want:,})")
    # describe() is the file path of a file source, also through the subsets a class split makes.
    paths = list(dict.fromkeys(src.describe(i) for src in (bundle.train, bundle.test) for i in range(len(src))))
    report.missing = _missing(paths)
    if report.missing:
        report.problems.append(f"{len(report.missing):,} listed images are missing")
    if deep:
        present = set(paths) - set(report.missing)
        report.corrupt = [p for p in paths if p in present and not _decodes(p)]
        if report.corrupt:
            report.problems.append(f"{len(report.corrupt):,} images do not decode (corrupt or truncated)")
    _print(spec, folder, report, deep, echo)
    return report


def _missing(paths: list[str]) -> list[str]:
    """The paths that do not exist; each folder is listed once (fast on network file systems)."""
    listing: dict[str, set[str]] = {}
    missing = []
    for path in paths:
        parent, name = os.path.split(path)
        if parent not in listing:
            try:
                listing[parent] = set(os.listdir(parent))
            except OSError:
                listing[parent] = set()
        if name not in listing[parent]:
            missing.append(path)
    return missing


def _decodes(path: str) -> bool:
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.load()  # decodes every pixel: a truncated file raises here
    except Exception:  # noqa: BLE001 (any decoder failure means the file is unusable)
        return False
    return True


def _print(spec: DownloadSpec, folder: Path, report: CheckReport, deep: bool, echo: Echo) -> None:
    echo(f"{spec.name} at {folder}")
    for key, got in report.counts.items():
        want = report.expected.get(key)
        mark = "" if want is None else ("  ok" if got == want else f"  MISMATCH (official {want:,})")
        echo(f"  {key:<14}{got:>10,}{mark}")
    for title, files in (("missing", report.missing), ("corrupt", report.corrupt)):
        if files:
            echo(f"  {title} ({len(files):,}):")
            for path in files[:SHOW]:
                echo(f"    {path}")
            if len(files) > SHOW:
                echo(f"    ... and {len(files) - SHOW:,} more")
    if report.ok:
        echo("  complete" + ("; every image decodes" if deep else " (--deep also decodes every image)"))
