"""iNaturalist-2018 as a metric-learning benchmark (the class-disjoint split of Smooth-AP, Brown et al. 2020).

The competition's train and val images are pooled and split by species: 5,690 training classes
(325,846 images) and 2,452 test classes (136,093 images). Labels come from the competition's JSON
annotations; the split from two list files. A list file holds one entry per line, either an image path
relative to root (the Smooth-AP files ``Inaturalist_{train,test}_set1.txt``) or a category id (a class
list: every image of that species).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dmlplug_builtins.datasets.common import assemble_bundle, log, missing_file_error, read_lines, resolve_root

if TYPE_CHECKING:
    from dmlplug_builtins.datasets import INaturalistParams

NAME = "inaturalist2018"

LAYOUT = """\
  <root>/
    train2018.json  val2018.json     competition annotations (COCO style: images, annotations, categories)
    train_val2018/<supercategory>/<category_id>/<image>.jpg
    Inat_dataset_splits/Inaturalist_train_set1.txt   one image path (relative to root) or one
    Inat_dataset_splits/Inaturalist_test_set1.txt    category id per line (class-disjoint lists)"""

STANDARD = {"train_images": 325846, "train_classes": 5690, "test_images": 136093, "test_classes": 2452}


def build_bundle(params: INaturalistParams):
    """Build the iNaturalist-2018 bundle from the JSON annotations and the split lists."""
    root = resolve_root(params.root, dataset=NAME, layout=LAYOUT)
    for relative in (*params.annotation_files, params.train_list, params.test_list):
        if not (root / relative).is_file():
            raise missing_file_error(NAME, root / relative, LAYOUT, root=root)
    catalogue = _Catalogue.read([root / f for f in params.annotation_files])
    entries = {split: _select(catalogue, root / listed) for split, listed in
               (("train", params.train_list), ("test", params.test_list))}
    shared = set(entries["train"][1]) & set(entries["test"][1])
    if shared:
        log.warning("%s: %d species are in both the train and the test list; the split is not class-disjoint",
                    NAME, len(shared))
    train, test = (_source(*entries[split], catalogue, split, root, params) for split in ("train", "test"))
    return assemble_bundle(NAME, params, train, test, root=root, layout="json+lists", expected=STANDARD,
                           info={"super_class_names": catalogue.super_names})


class _Catalogue:
    """Every annotated image: relative path -> category id, category names and super-categories."""

    def __init__(self, category_of: dict[str, int], names: dict[int, str], supers: dict[int, str]):
        self.category_of = category_of
        self.names = names
        self.super_of = supers
        self.super_names = sorted(set(supers.values()))

    @classmethod
    def read(cls, files) -> _Catalogue:
        import json

        from dmlplug.errors import DataError

        category_of, names, supers = {}, {}, {}
        for path in files:
            try:
                with open(path, encoding="utf-8") as handle:
                    data = json.load(handle)
                file_of = {image["id"]: image["file_name"] for image in data["images"]}
                for note in data["annotations"]:
                    category_of[file_of[note["image_id"]]] = int(note["category_id"])
                for category in data["categories"]:
                    names[int(category["id"])] = str(category.get("name", category["id"]))
                    supers[int(category["id"])] = str(category.get("supercategory", ""))
            except (ValueError, KeyError, TypeError) as exc:
                raise DataError(f"{NAME}: {path} is not a COCO-style annotation file ({type(exc).__name__}: "
                                f"{exc})", where=str(path),
                                fix="use the competition's train2018.json / val2018.json") from None
        return cls(category_of, names, supers)

    def images_of(self, category: int) -> list[str]:
        """Relative paths of every image of one category (built once, on first use)."""
        if not hasattr(self, "_by_category"):
            self._by_category: dict[int, list[str]] = {}
            for path, cat in self.category_of.items():
                self._by_category.setdefault(cat, []).append(path)
        return sorted(self._by_category.get(category, []))


def _select(catalogue: _Catalogue, list_path) -> tuple[list[str], list[int]]:
    """Relative image paths and category ids named by one list file (image paths or category ids)."""
    from dmlplug.errors import DataError

    paths, categories, unknown = [], [], []
    for row in read_lines(list_path):
        entry = row[0]
        if entry.isdigit():  # a class list: every image of that species
            found = catalogue.images_of(int(entry))
            if not found:
                unknown.append(entry)
            paths += found
            categories += [int(entry)] * len(found)
        elif entry in catalogue.category_of:
            paths.append(entry)
            categories.append(catalogue.category_of[entry])
        else:
            unknown.append(entry)
    if unknown:
        raise DataError(
            f"{NAME}: {len(unknown)} entries of {list_path} are in none of the annotation files, e.g. "
            + ", ".join(unknown[:5]),
            where=str(list_path),
            fix="the list must name images (paths relative to root, as in the JSON file_name) or category "
            "ids of the annotation files given in annotation_files")
    return paths, categories


def _source(paths, categories, catalogue: _Catalogue, split: str, root, params: INaturalistParams):
    import numpy as np

    from dmlplug.data.image_files import FileImageSource

    super_index = {name: i for i, name in enumerate(catalogue.super_names)}
    return FileImageSource.from_class_keys(
        [str(root / p) for p in paths], categories, class_names=catalogue.names, name=f"{NAME}/{split}",
        decode_errors=params.decode_errors, check_files=params.check_files,
        attributes={"super_labels": np.asarray([super_index[catalogue.super_of[c]] for c in categories],
                                               dtype=np.int64)})
