"""CARS196 loader on the three distributed layouts (devkit .mat files written in the real struct layout)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dmlplug.errors import DataError

LAYOUTS = ("annos_mat", "devkit", "folders")


def _class_histogram(source):
    return {name: int(np.sum(source.labels == i)) for i, name in enumerate(source.class_names)}


def _pixels_by_class(source):
    """Class name -> sorted mean colours of its images: the same photos whatever the layout."""
    out = {}
    for i in range(len(source)):
        colour = tuple(np.asarray(source.load_image(i)).reshape(-1, 3).mean(0).round().astype(int))
        out.setdefault(source.class_names[source.labels[i]].replace("/", "-"), []).append(colour)
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_layout_is_detected_and_split_by_class(build, trees, tmp_path, layout):
    root = trees.make_cars(tmp_path, layout)
    bundle = build("cars196", root=str(root), train_classes=2)
    assert bundle.info["layout"] == layout
    names = [n.replace("/", "-") for n in trees.CARS_NAMES]
    assert [n.replace("/", "-") for n in bundle.train.class_names] == names[:2]
    assert [n.replace("/", "-") for n in bundle.test.class_names] == names[2:]
    assert list(_class_histogram(bundle.train).values()) == trees.CARS_PER_CLASS[:2]
    assert list(_class_histogram(bundle.test).values()) == trees.CARS_PER_CLASS[2:]


def test_all_layouts_give_the_same_images_per_class(build, trees, tmp_path):
    seen = []
    for layout in LAYOUTS:
        root = trees.make_cars(tmp_path / layout, layout)
        bundle = build("cars196", root=str(root), train_classes=2)
        seen.append((_pixels_by_class(bundle.train), _pixels_by_class(bundle.test)))
    assert seen[0] == seen[1] == seen[2]


def test_devkit_pools_both_halves_whose_file_names_collide(build, trees, tmp_path):
    root = trees.make_cars(tmp_path, "devkit")
    bundle = build("cars196", root=str(root), train_classes=2)
    paths = bundle.train.paths + bundle.test.paths
    assert len(set(paths)) == len(paths) == sum(trees.CARS_PER_CLASS)
    assert {os.path.basename(os.path.dirname(p)) for p in paths} == {"cars_train", "cars_test"}


def test_default_split_is_98_classes_and_counts_are_checked(build, trees, tmp_path, caplog):
    root = trees.make_cars(tmp_path, "annos_mat")
    # all four fixture classes have ids <= 98: nothing would be left to test on
    with pytest.raises(DataError, match="both splits need at least one class"):
        build("cars196", root=str(root))
    bundle = build("cars196", root=str(root), train_classes=3)
    assert bundle.info["standard_split"] is None and bundle.test.class_names == [trees.CARS_NAMES[3]]


def test_missing_files_are_named(build, trees, tmp_path):
    with pytest.raises(DataError, match=r"expected file .*cars_annos\.mat is missing") as caught:
        build("cars196", root=str(tmp_path))
    assert "car_ims" in str(caught.value) and "devkit" in str(caught.value)
    root = trees.make_cars(tmp_path, "devkit")
    os.remove(root / "cars_test_annos_withlabels.mat")
    with pytest.raises(DataError, match=r"cars_test_annos_withlabels\.mat is missing"):
        build("cars196", root=str(root), train_classes=2)
    with pytest.raises(DataError, match=r"expected file .*images is missing"):
        build("cars196", root=str(root), layout="folders")


def test_absent_image_listed_in_the_annotations_is_reported(build, trees, tmp_path):
    root = trees.make_cars(tmp_path, "annos_mat")
    os.remove(root / "car_ims" / "000004.jpg")
    with pytest.raises(DataError, match=r"1 of 10 listed image files do not exist:\n.*car_ims/000004\.jpg"):
        build("cars196", root=str(root), train_classes=2)
