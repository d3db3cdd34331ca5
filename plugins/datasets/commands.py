"""``dmlplug data download | check``: install a benchmark dataset in one command, and verify a copy.

The datasets plugin's ``register_commands`` hookimpl (``plugins/datasets/__init__.py``) adds these functions;
the work happens in :mod:`.obtain`, the sources are listed in :mod:`.sources` (docs/datasets/README.md,
"Downloading").
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

NameArg = Annotated[str, typer.Argument(help="Dataset: cub200, cars196, sop or inaturalist2018.",
                                        show_default=False)]
RootOpt = Annotated[str | None, typer.Option(help="Data root (default: $DMLPLUG_DATA); the dataset is its "
                                                  "sub-folder the loader's default root names.")]


def _root(root: str | None) -> Path:
    from dmlplug.errors import DataError

    value = root or os.environ.get("DMLPLUG_DATA")
    if not value:
        raise DataError("no data root given", where="--root", fix="pass --root DIR or set DMLPLUG_DATA")
    return Path(os.path.expanduser(os.path.expandvars(value)))


def cmd_data_download(
    name: NameArg,
    root: RootOpt = None,
    mirror: Annotated[str | None, typer.Option(help="Base URL serving every file under its own name, instead "
                                                    "of the official URLs (default: $DMLPLUG_DATA_MIRROR).")] = None,
    keep_archives: Annotated[bool, typer.Option(help="Keep the archives after unpacking them.")] = False,
    progress: Annotated[bool | None, typer.Option(help="Progress bars (default: on a terminal only).",
                                                  show_default=False)] = None,
) -> None:
    """Download a dataset from its official source, verify it and unpack it where its loader looks.

    Resumable (run it again after an interruption), atomic (no half-unpacked folder under the final name) and
    idempotent (a present dataset is not downloaded again). Exit status 2 when a file has no official source
    any more (the message gives the manual steps) or a download does not verify.
    """
    from dmlplug_builtins.datasets.obtain import download
    from dmlplug_builtins.datasets.sources import find_spec

    download(find_spec(name), _root(root), mirror=mirror, keep_archives=keep_archives, progress=progress,
             echo=typer.echo)


def cmd_data_check(
    name: NameArg,
    root: RootOpt = None,
    deep: Annotated[bool, typer.Option(help="Also decode every image and name corrupt or truncated ones "
                                            "(slow).")] = False,
) -> None:
    """Compare a dataset on disk with the official counts (images, classes, split sizes); name missing files.

    Exit status 2 when anything differs.
    """
    from dmlplug.errors import DataError
    from dmlplug_builtins.datasets.obtain import check
    from dmlplug_builtins.datasets.sources import find_spec

    spec = find_spec(name)
    base = _root(root)
    report = check(spec, base, deep=deep, echo=typer.echo)
    if not report.ok:
        raise DataError(f"{spec.name} at {base / spec.folder} is not the official dataset: "
                        + "; ".join(report.problems), where=str(base / spec.folder),
                        fix=f"re-download it (move the folder away, then `dmlplug data download {spec.name} "
                        f"--root {base}`) or restore the files named above")
