"""``dmlplug data download``: the work behind the command of :mod:`.commands` (``check`` is :mod:`.checking`'s).

:func:`download` fetches a :class:`~dmlplug_builtins.datasets.sources.DownloadSpec`'s files into the data root
(resumable, verified: :mod:`dmlplug.data.download`), unpacks them atomically into the folder the loader reads and
deletes the archives.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

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
