"""CUB200-2011 loader on tiny trees in the archive's layout."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from dmlplug.errors import DataError


def _folder_of(source, index):
    return Path(source.describe(index)).parent.name


@pytest.mark.parametrize("official", [True, False])
def test_standard_split_classes_counts_and_labels(build, trees, tmp_path, official):
    root = trees.make_cub(tmp_path, official=official)
    bundle = build("cub200", root=str(root))
    assert bundle.train.class_names == ["001.Black_footed_Albatross", "002.Laysan_Albatross"]
    assert bundle.test.class_names == ["101.White_Pelican", "102.Western_Wood_Pewee"]
    assert (len(bundle.train), len(bundle.test)) == (5, 6)
    for source in (bundle.train, bundle.test):
        for i in range(len(source)):  # every label names the folder its file is in
            assert source.class_names[source.labels[i]] == _folder_of(source, i)
    assert bundle.val is None and bundle.default_augment == "dml"
    assert bundle.info["layout"] == ("official" if official else "folders")
    assert bundle.info["train_images"] == 5 and bundle.info["test_classes"] == 2
    assert bundle.train.load_image(0).mode == "RGB"


def test_root_may_be_the_parent_folder_and_come_from_the_environment(build, trees, tmp_path, monkeypatch):
    trees.make_cub(tmp_path)
    monkeypatch.setenv("DMLPLUG_DATA", str(tmp_path))
    assert len(build("cub200", root=str(tmp_path)).train) == 5
    bundle = build("cub200")  # default root "${DMLPLUG_DATA}/CUB_200_2011"
    assert bundle.info["root"] == str(tmp_path / "CUB_200_2011")


def test_train_classes_and_validation_split(build, trees, tmp_path):
    root = trees.make_cub(tmp_path)
    bundle = build("cub200", root=str(root), train_classes=101, val_classes=1)
    assert bundle.train.class_names == ["001.Black_footed_Albatross", "002.Laysan_Albatross"]
    assert bundle.val.class_names == ["101.White_Pelican"] and bundle.val.name == "cub200/val"
    assert bundle.test.class_names == ["102.Western_Wood_Pewee"]
    assert bundle.info["val_images"] == 2 and bundle.info["standard_split"] is None


def test_counts_are_compared_with_the_standard_split(build, trees, tmp_path, caplog, monkeypatch):
    root = trees.make_cub(tmp_path)
    with caplog.at_level(logging.WARNING, logger="dmlplug.data"):
        bundle = build("cub200", root=str(root))
    assert bundle.info["standard_split"] is False
    assert "train_images 5 (standard 5864)" in caplog.text and "test_images 6 (standard 5924)" in caplog.text
    import dmlplug_builtins.datasets.cub200 as cub

    caplog.clear()
    monkeypatch.setattr(cub, "STANDARD", {"train_images": 5, "train_classes": 2, "test_images": 6,
                                          "test_classes": 2})
    with caplog.at_level(logging.WARNING, logger="dmlplug.data"):
        assert build("cub200", root=str(root)).info["standard_split"] is True
    assert "differs from the standard split" not in caplog.text


def test_missing_root_names_the_path_the_layout_and_the_variable(build, tmp_path, monkeypatch):
    monkeypatch.delenv("DMLPLUG_DATA", raising=False)
    with pytest.raises(DataError) as caught:
        build("cub200")
    message = str(caught.value)
    assert "${DMLPLUG_DATA}/CUB_200_2011 is not a directory" in message
    assert "environment variable in it is not set" in message and "images.txt" in message
    with pytest.raises(DataError, match="dmlplug data download cub200"):
        build("cub200", root=str(tmp_path / "nowhere"))


def test_missing_annotation_file_is_named(build, trees, tmp_path):
    root = trees.make_cub(tmp_path)
    os.remove(root / "image_class_labels.txt")
    with pytest.raises(DataError, match=r"expected file .*image_class_labels\.txt is missing"):
        build("cub200", root=str(root), layout="official")
    # auto falls back to the folder layout when the image folders are there
    assert build("cub200", root=str(root)).info["layout"] == "folders"
    (root / "images").rename(root / "pictures")
    with pytest.raises(DataError, match=r"expected file .*image_class_labels\.txt"):
        build("cub200", root=str(root))


def test_listed_but_absent_images_are_reported_at_start_up(build, trees, tmp_path):
    root = trees.make_cub(tmp_path)
    victim = next((root / "images" / "102.Western_Wood_Pewee").iterdir())
    victim.unlink()
    with pytest.raises(DataError, match=r"1 of 11 listed image files do not exist") as caught:
        build("cub200", root=str(root))
    assert str(victim) in str(caught.value)


def test_corrupt_image_under_both_policies(build, trees, tmp_path):
    root = trees.make_cub(tmp_path)
    bundle = build("cub200", root=str(root))
    trees.corrupt(Path(bundle.train.describe(1)))
    with pytest.raises(DataError, match="cannot decode image"):
        bundle.train.load_image(1)
    skipping = build("cub200", root=str(root), decode_errors="skip")
    assert skipping.train.load_image(1).size == skipping.train.load_image(2).size
    assert skipping.train.skipped == 1


def test_unknown_parameter_is_a_recipe_error(build, trees, tmp_path):
    from dmlplug.errors import RecipeError

    with pytest.raises(RecipeError, match="unknown key"):
        build("cub200", root=str(tmp_path), train_clases=100)
