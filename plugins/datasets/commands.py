"""``dmlplug data download | check``: install a benchmark dataset in one command, and check any dataset on disk.

The datasets plugin's ``register_commands`` hookimpl (``plugins/datasets/__init__.py``) adds these functions;
the work happens in :mod:`.obtain` (download) and :mod:`.checking` (check), the sources are listed in
:mod:`.sources` (docs/datasets/README.md, "Downloading" and "Checking a dataset").
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
    name: Annotated[str, typer.Argument(
        help="A benchmark (cub200, cars196, sop, inaturalist2018) under --root; a dataset of your own (folder, csv, "
             "any registered one) whose own folder is --root; or a recipe file (.toml): its dataset, splits and "
             "sampler.", show_default=False)],
    root: Annotated[str | None, typer.Option(
        help="A benchmark: the data root holding its folder (default: $DMLPLUG_DATA). Your own dataset: its root "
             "parameter, the folder holding the class folders or the CSV file. Not with a recipe.")] = None,
    deep: Annotated[bool, typer.Option(help="Also decode every image and name corrupt or truncated ones "
                                            "(slow).")] = False,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Your own dataset: one of its parameters, key=value (file=list.csv, split=classes); a recipe: "
                      "an override, section.key=value. Repeatable.")] = None,
) -> None:
    """Check a dataset on disk before a run does: counts, missing and unusable files, splits, the sampler.

    Every listed file is checked (readable, an image header, a PNG's end; --deep decodes every image) and each bad
    one is named with its reason. A benchmark is compared with the official counts; every split of your own dataset
    needs the classes a run needs; a recipe's batch size and sampler are checked against its training classes as
    `dmlplug run` checks them. Exit status 2 when anything is wrong.
    """
    from dmlplug_builtins.datasets.checking import (
        CheckReport,
        check_benchmark,
        check_named,
        check_recipe_data,
        requires_root,
    )
    from dmlplug_builtins.datasets.sources import SPECS, find_spec

    sets = list(set_ or [])
    report: CheckReport
    if name.endswith(".toml") or Path(name).is_file():
        if root is not None:
            raise _error("--root is not for a recipe: the recipe's [data.dataset] root is checked", "--root",
                         "leave --root out, or override the root with --set data.dataset.root=DIR")
        report = check_recipe_data(name, sets, deep=deep, echo=typer.echo)
        place, fix = name, "replace the files named above, or change the recipe as the problems say"
    elif any(name == spec.name or name in spec.aliases for spec in SPECS.values()):
        spec = find_spec(name)
        base = _root(root)
        report = check_benchmark(spec, base, deep=deep, dataset_params=_params(sets), echo=typer.echo)
        place = str(base / spec.folder)
        fix = (f"re-download it (move the folder away, then `dmlplug data download {spec.name} --root {base}`) or "
               "restore the files named above")
    else:
        params = _params(sets)
        if root is not None:
            params["root"] = os.path.expanduser(os.path.expandvars(root))
        elif "root" not in params and requires_root(name):
            raise _error(f"dataset {name!r} needs its root to be checked", "--root",
                         f"pass --root DIR, the folder holding the dataset (dmlplug data check {name} --root DIR)")
        report = check_named(name, params, deep=deep, echo=typer.echo)
        place, fix = str(params.get("root", name)), "replace or remove the files named above, or change the splits"
    if not report.ok:
        raise _error(f"{report.title}: " + "; ".join(report.problems), place, fix)


def _params(pairs: list[str]) -> dict[str, object]:
    """``--set key=value`` of a dataset's parameters, each value read as in a recipe override."""
    import dmlplug

    params: dict[str, object] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise _error(f"--set {pair!r} is not key=value", "--set", "e.g. --set file=list.csv")
        params[key.strip()] = dmlplug.read_value(value)
    return params


def _error(what: str, where: str, fix: str) -> Exception:
    from dmlplug.errors import DataError

    return DataError(what, where=where, fix=fix)
