"""A dataset of your own, as a CSV file: one row per image with its path, label and split.

Columns (names configurable): ``path`` (relative to root, or absolute), ``label`` (any class name),
``split`` (``train`` / ``test`` / optionally ``val``), and optional ``query`` / ``gallery`` flags on test
rows (``1/0``, ``true/false``, ``yes/no``; empty = false). With flags the test split is evaluated as
query against gallery instead of leave-one-out; with only one of the two columns the other is its
complement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dmlplug_builtins.datasets.common import assemble_bundle, missing_file_error, resolve_root

if TYPE_CHECKING:
    from dmlplug_builtins.datasets import CsvParams

NAME = "csv"

LAYOUT = """\
  <root>/<file>    a CSV file with a header row, e.g.
      path,label,split,query,gallery
      images/a/0001.jpg,a,train,,
      images/x/0100.jpg,x,test,1,0
  <root>/images/...   the image files, paths relative to root (or absolute)"""

TRUE = {"1", "true", "yes", "y", "t"}
FALSE = {"0", "false", "no", "n", "f", ""}


def build_bundle(params: CsvParams):
    """Build a bundle from a CSV list of images."""
    from dmlplug.data.splits import query_gallery_masks
    from dmlplug.errors import DataError

    root = resolve_root(params.root, dataset=NAME, layout=LAYOUT)
    csv_path = root / params.file
    if not csv_path.is_file():
        raise missing_file_error(NAME, csv_path, LAYOUT, root=root)
    rows, flags = _read_rows(csv_path, params)
    by_split = {s: [r for r in rows if r[2] == s] for s in ("train", "test", "val")}
    for split in ("train", "test"):
        if not by_split[split]:
            raise DataError(f"{NAME}: {csv_path} has no {split!r} rows", where=str(csv_path),
                            fix=f"mark rows with {split} in the {params.split_column!r} column")
    if by_split["val"] and params.val_classes:
        raise DataError(f"{NAME}: {csv_path} has 'val' rows and val_classes = {params.val_classes} is set too",
                        where=str(csv_path), fix="use one of the two: drop val_classes or the 'val' rows")
    sources = {s: _source(by_split[s], root, s, params) for s in ("train", "test", "val") if by_split[s]}
    test_flags = [flags[i] for i, r in enumerate(rows) if r[2] == "test"]
    # A flag column is present for every row or for none; None means "absent".
    query_flags = [f[0] for f in test_flags] if test_flags[0][0] is not None else None
    gallery_flags = [f[1] for f in test_flags] if test_flags[0][1] is not None else None
    query, gallery = query_gallery_masks(sources["test"].labels, query_flags, gallery_flags, where=str(csv_path))
    return assemble_bundle(NAME, params, sources["train"], sources["test"], root=root, layout="csv",
                           val=sources.get("val"), test_query_mask=query, test_gallery_mask=gallery,
                           info={"file": str(csv_path)})


def _read_rows(csv_path, params: CsvParams):
    """``(path, label, split)`` per row and ``(query, gallery)`` flags (``None`` when the column is absent)."""
    import csv

    from dmlplug.errors import DataError

    with open(csv_path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle, delimiter=params.delimiter)
        columns = reader.fieldnames or []
        needed = (params.path_column, params.label_column, params.split_column)
        absent = [c for c in needed if c not in columns]
        if absent:
            raise DataError(f"{NAME}: {csv_path} has no column {absent[0]!r} (columns: {', '.join(columns)})",
                            where=str(csv_path), fix="add the column, or name it with the *_column options")
        optional = [c if c in columns else None for c in (params.query_column, params.gallery_column)]
        rows, flags = [], []
        for line, record in enumerate(reader, start=2):
            split = (record[params.split_column] or "").strip().lower()
            if split not in ("train", "test", "val"):
                raise DataError(f"{NAME}: split {split!r} on line {line} is not train, test or val",
                                where=f"{csv_path}:{line}")
            rows.append((record[params.path_column].strip(), record[params.label_column].strip(), split))
            flags.append(tuple(None if c is None else _flag(record[c], csv_path, line) for c in optional))
    return rows, flags


def _flag(value: str | None, csv_path, line: int) -> bool:
    from dmlplug.errors import DataError

    text = (value or "").strip().lower()
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    raise DataError(f"{NAME}: flag {value!r} on line {line} is not 1/0, true/false or yes/no",
                    where=f"{csv_path}:{line}")


def _source(rows, root, split: str, params: CsvParams):
    from dmlplug.data.image_files import FileImageSource

    labels = [r[1] for r in rows]
    # Numeric labels sort as numbers ("2" before "10"), anything else by name.
    numeric = all(label.lstrip("-").isdigit() for label in labels)
    order = sorted(set(labels), key=int) if numeric else sorted(set(labels))
    return FileImageSource.from_class_keys(
        [str(root / r[0]) for r in rows], labels, class_order=order, name=f"{NAME}/{split}",
        decode_errors=params.decode_errors, check_files=params.check_files)
