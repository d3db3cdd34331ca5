"""Tiny dataset trees in the real on-disk layouts, written into tmp_path.

Every image is a small solid-colour picture whose colour encodes its class and position, so a test can
tell from the pixels which file was served.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def write_image(path: Path, seed: int, size: tuple[int, int] = (14, 10)) -> Path:
    """A small RGB image with a colour derived from ``seed`` (JPEG or PNG by suffix)."""
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    colour = ((seed * 53) % 256, (seed * 97) % 256, (seed * 31 + 80) % 256)
    fmt = "PNG" if path.suffix.lower() == ".png" else "JPEG"
    Image.new("RGB", size, colour).save(path, format=fmt)
    return path


def corrupt(path: Path) -> None:
    """Overwrite an image with bytes no decoder accepts."""
    path.write_bytes(b"this is not an image")


def truncate(path: Path) -> None:
    """Keep only the first part of an image file (a partial download)."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


# CUB: class ids 1, 2 (train under the standard 100/100 split) and 101, 102 (test).
CUB_CLASSES = {1: "001.Black_footed_Albatross", 2: "002.Laysan_Albatross",
               101: "101.White_Pelican", 102: "102.Western_Wood_Pewee"}
CUB_PER_CLASS = {1: 3, 2: 2, 101: 2, 102: 4}


def make_cub(base: Path, *, official: bool = True) -> Path:
    """``base/CUB_200_2011`` in the archive's layout; returns that folder."""
    root = base / "CUB_200_2011"
    image_lines, label_lines = [], []
    image_id = 0
    for class_id, folder in CUB_CLASSES.items():
        for k in range(CUB_PER_CLASS[class_id]):
            image_id += 1
            species = folder.split(".", 1)[1]
            relative = f"{folder}/{species}_{k + 1:04d}_{700000 + image_id}.jpg"
            write_image(root / "images" / relative, seed=class_id * 10 + k)
            image_lines.append(f"{image_id} {relative}")
            label_lines.append(f"{image_id} {class_id}")
    if official:
        (root / "images.txt").write_text("\n".join(image_lines) + "\n")
        (root / "image_class_labels.txt").write_text("\n".join(label_lines) + "\n")
        (root / "classes.txt").write_text("\n".join(f"{c} {n}" for c, n in CUB_CLASSES.items()) + "\n")
        (root / "train_test_split.txt").write_text("\n".join(f"{i + 1} {i % 2}" for i in range(image_id)))
    return root


# CARS: four models; official ids 1..4, names sorted alphabetically as in the real class list.
CARS_NAMES = ["AM General Hummer SUV 2000", "Acura RL Sedan 2012", "Eagle Talon Hatchback 1998",
              "Ram C/V Cargo Van Minivan 2012"]
CARS_PER_CLASS = [2, 3, 2, 3]


def _mat_struct(records: list[dict]) -> np.ndarray:
    """A MATLAB 1×N struct array (as scipy.io.savemat writes it) from a list of dicts."""
    fields = list(records[0])
    array = np.zeros((1, len(records)), dtype=[(f, "O") for f in fields])
    for i, record in enumerate(records):
        for field in fields:
            value = record[field]
            array[0, i][field] = np.array([value]) if isinstance(value, str) else np.array([[value]], np.uint16)
    return array


def _cell(strings: list[str]) -> np.ndarray:
    cell = np.empty((1, len(strings)), dtype=object)
    for i, s in enumerate(strings):
        cell[0, i] = np.array([s])
    return cell


def make_cars(base: Path, layout: str) -> Path:
    """``base/cars196`` in one of the layouts ``annos_mat``, ``devkit``, ``folders``."""
    from scipy.io import savemat

    root = base / "cars196"
    root.mkdir(parents=True)
    images = [(c + 1, k) for c, n in enumerate(CARS_PER_CLASS) for k in range(n)]
    box = {"bbox_x1": 1, "bbox_y1": 1, "bbox_x2": 9, "bbox_y2": 7}
    if layout == "annos_mat":
        records = []
        for i, (cls, k) in enumerate(images, start=1):
            relative = f"car_ims/{i:06d}.jpg"
            write_image(root / relative, seed=cls * 10 + k)
            records.append({"relative_im_path": relative, **box, "class": cls, "test": i % 2})
        savemat(root / "cars_annos.mat", {"annotations": _mat_struct(records), "class_names": _cell(CARS_NAMES)})
    elif layout == "devkit":
        halves = {"train": [], "test": []}
        for i, (cls, k) in enumerate(images):
            halves["train" if i % 2 == 0 else "test"].append((cls, k))
        for half, members in halves.items():
            records = []
            for j, (cls, k) in enumerate(members, start=1):
                # Both halves number their files from 00001.jpg, as the real release does.
                write_image(root / f"cars_{half}" / f"{j:05d}.jpg", seed=cls * 10 + k)
                records.append({**box, "class": cls, "fname": f"{j:05d}.jpg"})
            target = (root / "devkit" / "cars_train_annos.mat" if half == "train"
                      else root / "cars_test_annos_withlabels.mat")
            target.parent.mkdir(exist_ok=True)
            savemat(target, {"annotations": _mat_struct(records)})
        savemat(root / "devkit" / "cars_meta.mat", {"class_names": _cell(CARS_NAMES)})
    else:
        for i, (cls, k) in enumerate(images, start=1):
            folder = CARS_NAMES[cls - 1].replace("/", "-")
            write_image(root / "images" / folder / f"{i:05d}.jpg", seed=cls * 10 + k)
    return root


# SOP: classes 1-3 train, 4-5 test; super-classes 1 (bicycle) and 2 (chair).
SOP_IMAGES = {
    "train": [(1, 1, "bicycle_final/111085122871_0.JPG"), (1, 1, "bicycle_final/111085122871_1.JPG"),
              (2, 2, "chair_final/222_0.JPG"), (2, 2, "chair_final/222_1.JPG"), (2, 2, "chair_final/222_2.JPG"),
              (3, 1, "bicycle_final/333_0.JPG"), (3, 1, "bicycle_final/333_1.JPG")],
    "test": [(4, 2, "chair_final/444_0.JPG"), (4, 2, "chair_final/444_1.JPG"),
             (5, 1, "bicycle_final/555_0.JPG"), (5, 1, "bicycle_final/555_1.JPG")],
}


def make_sop(base: Path, *, info_files: bool = False) -> Path:
    """``base/Stanford_Online_Products`` (or the Revisiting ``Info_Files`` re-packaging)."""
    root = base / "Stanford_Online_Products"
    list_dir, image_dir = (root / "Info_Files", root / "images") if info_files else (root, root)
    list_dir.mkdir(parents=True, exist_ok=True)
    image_id = 0
    for split, rows in SOP_IMAGES.items():
        lines = ["image_id class_id super_class_id path"]
        for class_id, super_id, relative in rows:
            image_id += 1
            write_image(image_dir / relative, seed=image_id)
            lines.append(f"{image_id} {class_id} {super_id} {relative}")
        (list_dir / f"Ebay_{split}.txt").write_text("\n".join(lines) + "\n")
    return root


# iNaturalist: category id -> (supercategory, number of images); 10, 11, 12 train, 20, 21 test.
INAT_CATEGORIES = {10: ("Aves", 3), 11: ("Aves", 2), 12: ("Plantae", 2), 20: ("Plantae", 2), 21: ("Fungi", 3)}
INAT_TRAIN, INAT_TEST = (10, 11, 12), (20, 21)


def make_inaturalist(base: Path, *, class_lists: bool = False) -> Path:
    """``base/inaturalist2018`` with two JSON files, images and the two split lists."""
    import json

    root = base / "inaturalist2018"
    files = {"train2018.json": {"images": [], "annotations": [], "categories": []},
             "val2018.json": {"images": [], "annotations": [], "categories": []}}
    paths_of: dict[int, list[str]] = {}
    image_id = 0
    for category, (super_name, count) in INAT_CATEGORIES.items():
        for k in range(count):
            image_id += 1
            relative = f"train_val2018/{super_name}/{category}/{image_id:032x}.jpg"
            write_image(root / relative, seed=image_id)
            paths_of.setdefault(category, []).append(relative)
            # Alternate between the two competition files: the DML split pools both.
            data = files["train2018.json" if k % 2 == 0 else "val2018.json"]
            data["images"].append({"id": image_id, "file_name": relative, "width": 14, "height": 10})
            data["annotations"].append({"id": image_id, "image_id": image_id, "category_id": category})
    for data in files.values():
        data["categories"] = [{"id": c, "name": f"species_{c}", "supercategory": s}
                              for c, (s, _) in INAT_CATEGORIES.items()]
    for name, data in files.items():
        (root / name).write_text(json.dumps(data))
    lists = root / "Inat_dataset_splits"
    lists.mkdir()
    for split, categories in (("train", INAT_TRAIN), ("test", INAT_TEST)):
        entries = [str(c) for c in categories] if class_lists else [p for c in categories for p in paths_of[c]]
        (lists / f"Inaturalist_{split}_set1.txt").write_text("\n".join(entries) + "\n")
    return root


@pytest.fixture
def build():
    """Build a dataset registered by the datasets plugin's hook, without the plugin host."""
    from dmlplug.context import BuildContext
    from dmlplug.registry import Registry
    from dmlplug_builtins.datasets import register_datasets

    def _build(dataset: str, **params):
        registry = Registry()
        register_datasets(registry.register_callback("datasets", "builtin"))
        info = registry.get("datasets", dataset)
        return info.build(info.validate(params, where="data.dataset"), BuildContext())

    return _build


@pytest.fixture
def trees():
    """The tree builders and their constants (conftest helpers are reached through a fixture, not an import)."""
    from types import SimpleNamespace

    return SimpleNamespace(**{name: value for name, value in globals().items()
                              if name.isupper() or name in _BUILDERS})


_BUILDERS = {"write_image", "corrupt", "truncate", "make_cub", "make_cars", "make_sop", "make_inaturalist"}
