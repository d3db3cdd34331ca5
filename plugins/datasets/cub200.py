"""CUB200-2011 (Caltech-UCSD Birds): 11,788 images of 200 bird species.

Zero-shot protocol (docs/methods/revisiting.md): classes 1-100 train (5,864 images), 101-200 test (5,924 images);
the classification split in ``train_test_split.txt`` is not used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dmlplug_builtins.datasets.common import assemble_bundle, missing_file_error, read_lines, resolve_root

if TYPE_CHECKING:
    from dmlplug_builtins.datasets import Cub200Params

NAME = "cub200"

LAYOUT = """\
  CUB_200_2011/                      <- root (or its parent folder)
    images/001.Black_footed_Albatross/Black_Footed_Albatross_0001_796111.jpg ...
    images.txt                       "<image_id> <path under images/>"
    image_class_labels.txt           "<image_id> <class_id 1..200>"
    classes.txt                      "<class_id> <NNN.Class_Name>"
  or, without the .txt files (layout = "folders"): images/<NNN.Class_Name>/*.jpg"""

ANNOTATIONS = ("images.txt", "image_class_labels.txt", "classes.txt")

STANDARD = {"train_images": 5864, "train_classes": 100, "test_images": 5924, "test_classes": 100}


def build_bundle(params: Cub200Params):
    """Build the CUB200-2011 bundle (train: classes 1..N, test: the rest)."""
    from dmlplug.data.image_files import FileImageSource
    from dmlplug.data.splits import split_by_class_order

    root = resolve_root(params.root, dataset=NAME, layout=LAYOUT)
    if not (root / "images").is_dir() and (root / "CUB_200_2011").is_dir():
        root = root / "CUB_200_2011"  # root points at the folder the archive was extracted into
    layout = _detect_layout(root, params.layout)
    paths, class_ids, names = _read_official(root) if layout == "official" else _read_folders(root)
    source = FileImageSource.from_class_keys(
        paths, class_ids, class_names=names, name=NAME, decode_errors=params.decode_errors,
        check_files=params.check_files)
    order = sorted(set(class_ids))
    train, test = split_by_class_order(
        source, sum(1 for c in order if c <= params.train_classes), names=(f"{NAME}/train", f"{NAME}/test"))
    return assemble_bundle(NAME, params, train, test, root=root, layout=layout,
                           expected=STANDARD if params.train_classes == 100 else None)


def _detect_layout(root, requested: str) -> str:
    if requested in ("auto", "official"):
        missing = [name for name in ANNOTATIONS if not (root / name).is_file()]
        if not missing:
            return "official"
        if requested == "official" or not (root / "images").is_dir():
            raise missing_file_error(NAME, root / missing[0], LAYOUT, root=root)
    if not (root / "images").is_dir():
        raise missing_file_error(NAME, root / "images", LAYOUT, root=root)
    return "folders"


def _read_official(root):
    """Image paths, class ids and class names from the official annotation files."""
    from dmlplug.errors import DataError

    names = {int(row[0]): row[1] for row in read_lines(root / "classes.txt")}
    relpaths = {row[0]: row[1] for row in read_lines(root / "images.txt")}
    labels = {row[0]: int(row[1]) for row in read_lines(root / "image_class_labels.txt")}
    if relpaths.keys() != labels.keys():
        raise DataError(
            f"{NAME}: images.txt lists {len(relpaths)} images but image_class_labels.txt {len(labels)}",
            where=str(root), fix="re-extract the archive; the two files must list the same image ids")
    ids = sorted(relpaths, key=int)
    unknown = {labels[i] for i in ids} - names.keys()
    if unknown:
        raise DataError(f"{NAME}: class ids {sorted(unknown)[:5]} are not in classes.txt", where=str(root))
    return ([str(root / "images" / relpaths[i]) for i in ids], [labels[i] for i in ids], names)


def _read_folders(root):
    """Image paths, class ids (the numeric folder prefix) and names from ``images/<NNN.Name>/``."""
    from dmlplug.data.image_files import list_class_folders, list_image_files
    from dmlplug.errors import DataError

    paths, class_ids, names = [], [], {}
    for folder in list_class_folders(root / "images"):
        prefix = folder.split(".", 1)[0]
        if not prefix.isdigit():
            raise DataError(f"{NAME}: class folder {folder!r} does not start with its class number",
                            where=str(root / "images"), fix="expected folders like 001.Black_footed_Albatross")
        files = list_image_files(root / "images" / folder)
        names[int(prefix)] = folder
        paths += files
        class_ids += [int(prefix)] * len(files)
    return paths, class_ids, names
