"""What every on-disk dataset loader shares: root resolution, annotation reading, bundle assembly.

The shared parameters are :class:`dmlplug_builtins.datasets.FileDatasetParams`. Loaders import numpy and the
data modules inside their functions, so importing a loader stays cheap.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmlplug.errors import DataError

if TYPE_CHECKING:
    from dmlplug_builtins.datasets import FileDatasetParams

log = logging.getLogger("dmlplug.data")

DATA_ENV = "DMLPLUG_DATA"


def resolve_root(root: str, *, dataset: str, layout: str) -> Path:
    """Expand ``~`` and ``$VARS`` in ``root`` and check that it is a directory.

    The recipe normally interpolates ``${DMLPLUG_DATA}`` already; expanding again is harmless and makes
    the parameter defaults (which contain it) work outside recipes too.

    Raises:
        DataError: The directory does not exist; the message describes the expected layout.
    """
    expanded = os.path.expanduser(os.path.expandvars(root))
    path = Path(expanded)
    if "$" in expanded or not path.is_dir():
        # expandvars leaves unknown variables as they are, so a "$" left over means one is unset.
        unset = "; an environment variable in it is not set" if "$" in expanded else ""
        raise DataError(
            f"{dataset}: data root {expanded} is not a directory{unset}",
            where=f"[data.dataset] root = {root!r}",
            fix=f"{_install_hint(dataset)}point root at it, e.g. "
            f"root = \"${{{DATA_ENV}}}/...\" with {DATA_ENV} set to your data folder. Expected layout:\n"
            + layout,
        )
    return path


def _install_hint(dataset: str) -> str:
    from dmlplug_builtins.datasets.sources import SPECS

    if dataset in SPECS:
        return (f"install it with `dmlplug data download {dataset} --root <data folder>` (or set download = true "
                "in [data.dataset]) and ")
    return "put the images on disk (dmlplug never downloads them) and "


def missing_file_error(dataset: str, expected: Path, layout: str, *, root: Path) -> DataError:
    """The error for an annotation file that is not where the layout puts it."""
    return DataError(
        f"{dataset}: expected file {expected} is missing",
        where=f"[data.dataset] root = {str(root)!r}",
        fix="point root at the extracted dataset (or set the layout option); expected layout:\n" + layout,
    )


def read_lines(path: Path) -> list[list[str]]:
    """Whitespace-split, non-empty lines of a text annotation file."""
    with open(path, encoding="utf-8") as handle:
        return [line.split() for line in handle if line.strip()]


def assemble_bundle(
    dataset: str,
    params: FileDatasetParams,
    train: Any,
    test: Any,
    *,
    root: Path,
    layout: str,
    expected: dict[str, int] | None = None,
    info: dict[str, Any] | None = None,
    val: Any = None,
    test_query_mask: Any = None,
    test_gallery_mask: Any = None,
) -> Any:
    """Check the image files, carve the validation split, compare counts with the standard ones, build the bundle.

    With ``params.check_files`` every file gets the cheap check of :mod:`.file_checks` (exists, readable, an image
    header, a PNG's end): a bad file fails here, or is logged under ``decode_errors = "skip"``.

    Args:
        dataset: Registered dataset name, for messages.
        params: The loader's parameters (validation options).
        train: Training source (before the validation carve).
        test: Test source.
        root: Resolved data root.
        layout: Name of the detected layout, recorded in ``info``.
        expected: Standard counts (keys ``train_images``, ``train_classes``, ``test_images``,
            ``test_classes``); a difference is logged as a warning, never an error, because partial
            copies are legitimate for experiments (but results are then not comparable to papers).
        info: Extra facts for ``bundle.info``.
        val: A validation split the dataset defines itself; then none is carved.
        test_query_mask: Optional query flags over ``test``.
        test_gallery_mask: Optional gallery flags over ``test``.
    """
    from dmlplug.data import DatasetBundle
    from dmlplug.data.splits import carve_validation

    if params.check_files:  # before the run's initial evaluation, instead of in the epoch that reads the file
        from dmlplug_builtins.datasets.file_checks import check_sources

        check_sources(dataset, (train, test, val), decode_errors=params.decode_errors)
    counts = {
        "train_images": len(train), "train_classes": train.num_classes,
        "test_images": len(test), "test_classes": test.num_classes,
    }
    standard = None
    if expected is not None:
        differ = {k: (counts[k], v) for k, v in expected.items() if counts[k] != v}
        standard = not differ
        if differ:
            found = ", ".join(f"{k} {got} (standard {want})" for k, (got, want) in differ.items())
            log.warning("%s at %s differs from the standard split: %s; results will not be comparable "
                        "to published numbers", dataset, root, found)
    if val is None:
        train, val = carve_validation(train, params.val_classes, strategy=params.val_strategy,
                                      seed=params.val_seed)
    if val is not None:
        counts.update(train_images=len(train), train_classes=train.num_classes,
                      val_images=len(val), val_classes=val.num_classes)
    return DatasetBundle(
        train=train,
        test=test,
        val=val,
        test_query_mask=test_query_mask,
        test_gallery_mask=test_gallery_mask,
        default_augment="dml",
        info={"dataset": dataset, "root": str(root), "layout": layout, **counts,
              "standard_split": standard, **(info or {})},
    )
