"""Stanford Online Products: 120,053 images of 22,634 products in 12 super-classes.

Standard split (docs/methods/revisiting.md): ``Ebay_train.txt`` (59,551 images, 11,318 classes) and
``Ebay_test.txt`` (60,502 images, 11,316 classes). Every source carries the super-class of each image
as ``source.attributes["super_labels"]`` (``0 .. 11``, the same numbering in every split) and the bundle
names them in ``info["super_class_names"]``. Class names are the product ids of the file names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dmlplug_builtins.datasets.common import assemble_bundle, missing_file_error, read_lines, resolve_root

if TYPE_CHECKING:
    from dmlplug_builtins.datasets import SopParams

NAME = "sop"

LAYOUT = """\
  Stanford_Online_Products/          <- root (or its parent folder)
    Ebay_train.txt  Ebay_test.txt    header "image_id class_id super_class_id path", then
                                     "1 1 1 bicycle_final/111085122871_0.JPG" (path relative to root)
    bicycle_final/ cabinet_final/ ... toaster_final/   (12 super-class folders of images)
  or the re-packaging of the Revisiting code (layout = "info_files"):
    Info_Files/Ebay_train.txt  Info_Files/Ebay_test.txt   (paths relative to images/)
    images/<super>_final/*.JPG"""

STANDARD = {"train_images": 59551, "train_classes": 11318, "test_images": 60502, "test_classes": 11316}


def build_bundle(params: SopParams):
    """Build the Stanford Online Products bundle from Ebay_train.txt / Ebay_test.txt."""
    root = resolve_root(params.root, dataset=NAME, layout=LAYOUT)
    if not _has_official(root) and _has_official(root / "Stanford_Online_Products"):
        root = root / "Stanford_Online_Products"  # root points at the folder the zip was extracted into
    layout, lists, image_dir = _detect_layout(root, params.layout)
    rows = {split: _read_split(lists[split]) for split in ("train", "test")}
    super_names = _super_class_names(rows["train"] + rows["test"])
    train, test = (_source(rows[split], image_dir, split, params) for split in ("train", "test"))
    return assemble_bundle(NAME, params, train, test, root=root, layout=layout, expected=STANDARD,
                           info={"super_class_names": super_names})


def _has_official(root) -> bool:
    return (root / "Ebay_train.txt").is_file() and (root / "Ebay_test.txt").is_file()


def _detect_layout(root, requested: str):
    candidates = {"official": (root, root), "info_files": (root / "Info_Files", root / "images")}
    order = ["official", "info_files"] if requested == "auto" else [requested]
    for layout in order:
        folder, image_dir = candidates[layout]
        if all((folder / f"Ebay_{s}.txt").is_file() for s in ("train", "test")):
            return layout, {s: folder / f"Ebay_{s}.txt" for s in ("train", "test")}, image_dir
    folder = candidates[order[0]][0]
    absent = next(folder / f"Ebay_{s}.txt" for s in ("train", "test") if not (folder / f"Ebay_{s}.txt").is_file())
    raise missing_file_error(NAME, absent, LAYOUT, root=root)


def _read_split(path) -> list[tuple[int, int, str]]:
    """``(class_id, super_class_id, relative path)`` rows of one Ebay_*.txt file."""
    from dmlplug.errors import DataError

    rows = []
    for number, row in enumerate(read_lines(path), start=1):
        if number == 1 and not row[0].isdigit():
            continue  # the header line
        if len(row) != 4 or not (row[1].isdigit() and row[2].isdigit()):
            raise DataError(f"{NAME}: line {number} of {path} is not 'image_id class_id super_class_id path'",
                            where=f"{path}:{number}", fix="re-extract the archive")
        rows.append((int(row[1]), int(row[2]), row[3]))
    return rows


def _super_class_names(rows) -> list[str]:
    """Super-class names (the image folder, e.g. ``bicycle_final``) indexed by ``super_class_id - 1``."""
    by_id: dict[int, str] = {}
    for _, super_id, relpath in rows:
        by_id.setdefault(super_id, relpath.split("/", 1)[0])
    return [by_id.get(i, str(i)) for i in range(1, max(by_id, default=0) + 1)]


def _source(rows, image_dir, split: str, params: SopParams):
    import numpy as np

    from dmlplug.data.image_files import FileImageSource

    class_ids = [r[0] for r in rows]
    # The product id (file name up to the last "_") names a class; ooDML identifies classes by it.
    names = {r[0]: r[2].rsplit("/", 1)[-1].rsplit("_", 1)[0] for r in rows}
    return FileImageSource.from_class_keys(
        [str(image_dir / r[2]) for r in rows], class_ids, class_names=names, name=f"{NAME}/{split}",
        decode_errors=params.decode_errors, check_files=params.check_files,
        attributes={"super_labels": np.asarray([r[1] - 1 for r in rows], dtype=np.int64)})
