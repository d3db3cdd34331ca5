"""Stanford Online Products and iNaturalist-2018 loaders on tiny trees in their real layouts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from dmlplug.errors import DataError


@pytest.mark.parametrize("info_files", [False, True])
def test_sop_split_files_classes_labels_and_super_labels(build, trees, tmp_path, info_files):
    root = trees.make_sop(tmp_path, info_files=info_files)
    bundle = build("sop", root=str(root))
    assert bundle.info["layout"] == ("info_files" if info_files else "official")
    assert (len(bundle.train), bundle.train.num_classes) == (7, 3)
    assert (len(bundle.test), bundle.test.num_classes) == (4, 2)
    assert bundle.train.class_names == ["111085122871", "222", "333"]  # product ids, in class_id order
    assert bundle.train.labels.tolist() == [0, 0, 1, 1, 1, 2, 2]
    assert bundle.info["super_class_names"] == ["bicycle_final", "chair_final"]
    for source in (bundle.train, bundle.test):
        supers = source.attributes["super_labels"]
        folders = [Path(source.describe(i)).parent.name for i in range(len(source))]
        assert [bundle.info["super_class_names"][s] for s in supers] == folders
    assert bundle.test.load_image(0).mode == "RGB"


def test_sop_root_may_be_the_parent_and_validation_keeps_super_labels(build, trees, tmp_path):
    trees.make_sop(tmp_path)
    bundle = build("sop", root=str(tmp_path), val_classes=1, val_seed=1)
    assert bundle.val.num_classes == 1 and bundle.train.num_classes == 2
    assert sorted(bundle.train.class_names + bundle.val.class_names) == ["111085122871", "222", "333"]
    for source in (bundle.train, bundle.val):
        folders = [Path(p).parent.name for p in source.paths]
        assert [bundle.info["super_class_names"][s] for s in source.attributes["super_labels"]] == folders


def test_sop_missing_split_file_and_bad_line(build, trees, tmp_path):
    root = trees.make_sop(tmp_path)
    os.remove(root / "Ebay_test.txt")
    with pytest.raises(DataError, match=r"expected file .*Ebay_test\.txt is missing") as caught:
        build("sop", root=str(root))
    assert "super_class_id" in str(caught.value)  # the layout description
    (root / "Ebay_test.txt").write_text("image_id class_id super_class_id path\n1 4 chair_final/444_0.JPG\n")
    with pytest.raises(DataError, match="line 2 of"):
        build("sop", root=str(root))


def test_sop_counts_differ_from_standard_split(build, trees, tmp_path, caplog):
    bundle = build("sop", root=str(trees.make_sop(tmp_path)))
    assert bundle.info["standard_split"] is False and "train_classes 3 (standard 11318)" in caplog.text


@pytest.mark.parametrize("class_lists", [False, True])
def test_inaturalist_pools_json_files_and_splits_by_list(build, trees, tmp_path, class_lists):
    root = trees.make_inaturalist(tmp_path, class_lists=class_lists)
    bundle = build("inaturalist2018", root=str(root))
    assert bundle.train.class_names == ["species_10", "species_11", "species_12"]
    assert bundle.test.class_names == ["species_20", "species_21"]
    counts = {c: n for c, (_, n) in trees.INAT_CATEGORIES.items()}
    assert np.bincount(bundle.train.labels).tolist() == [counts[c] for c in trees.INAT_TRAIN]
    assert np.bincount(bundle.test.labels).tolist() == [counts[c] for c in trees.INAT_TEST]
    for source in (bundle.train, bundle.test):
        for i in range(len(source)):  # label and super-class agree with the folder names
            category, supercategory = Path(source.describe(i)).parts[-2], Path(source.describe(i)).parts[-3]
            assert source.class_names[source.labels[i]] == f"species_{category}"
            assert bundle.info["super_class_names"][source.attributes["super_labels"][i]] == supercategory


def test_inaturalist_unknown_entries_and_missing_files(build, trees, tmp_path, caplog):
    root = trees.make_inaturalist(tmp_path)
    listing = root / "Inat_dataset_splits" / "Inaturalist_test_set1.txt"
    listing.write_text(listing.read_text() + "train_val2018/Aves/99/nope.jpg\n999\n")
    with pytest.raises(DataError, match="2 entries of .* are in none of the annotation files") as caught:
        build("inaturalist2018", root=str(root))
    assert "nope.jpg" in str(caught.value)
    listing.write_text("10\n20\n")  # category 10 is also a training class
    build("inaturalist2018", root=str(root))
    assert "1 species are in both the train and the test list" in caplog.text
    os.remove(root / "val2018.json")
    with pytest.raises(DataError, match=r"expected file .*val2018\.json is missing"):
        build("inaturalist2018", root=str(root))


def test_inaturalist_rejects_a_json_that_is_not_coco_style(build, trees, tmp_path):
    root = trees.make_inaturalist(tmp_path)
    (root / "val2018.json").write_text(json.dumps({"images": []}))
    with pytest.raises(DataError, match="not a COCO-style annotation file"):
        build("inaturalist2018", root=str(root))
