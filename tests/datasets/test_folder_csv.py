"""The folder and CSV datasets for users' own images."""

from __future__ import annotations

import numpy as np
import pytest

from dmlplug.errors import DataError


def _class_tree(trees, base, classes):
    for name, count in classes.items():
        for k in range(count):
            trees.write_image(base / name / f"{k}.jpg", seed=len(name) * 10 + k)


def test_folder_with_train_and_test_subfolders(build, trees, tmp_path):
    _class_tree(trees, tmp_path / "train", {"cat": 2, "dog": 3})
    _class_tree(trees, tmp_path / "test", {"dog": 1, "eel": 2, "fox": 1})
    (tmp_path / "train" / "cat" / "._0.jpg").write_bytes(b"\x00\x05\x16\x07")
    bundle = build("folder", root=str(tmp_path))
    assert bundle.info["layout"] == "subfolders" and bundle.info["shared_classes"] == 1
    assert bundle.train.class_names == ["cat", "dog"] and bundle.train.labels.tolist() == [0, 0, 1, 1, 1]
    assert bundle.test.class_names == ["dog", "eel", "fox"] and len(bundle.test) == 4


def test_folder_split_by_sorted_classes(build, trees, tmp_path):
    _class_tree(trees, tmp_path, {"b": 2, "a": 1, "d": 2, "c": 3, "e": 1})
    bundle = build("folder", root=str(tmp_path), train_classes=0.4)
    assert bundle.info["layout"] == "classes"
    assert bundle.train.class_names == ["a", "b"] and bundle.test.class_names == ["c", "d", "e"]
    bundle = build("folder", root=str(tmp_path), train_classes=3, val_classes=1)
    assert bundle.train.class_names == ["a", "b"] and bundle.val.class_names == ["c"]
    with pytest.raises(DataError, match="train_classes"):
        build("folder", root=str(tmp_path), train_classes=5)


def test_folder_without_images_is_an_error(build, tmp_path):
    (tmp_path / "empty_class").mkdir()
    with pytest.raises(DataError, match="no images in class folders"):
        build("folder", root=str(tmp_path))


def _csv_tree(trees, tmp_path, header, rows):
    for row in rows:
        trees.write_image(tmp_path / row[0], seed=len(row[0]))
    lines = [",".join(header)] + [",".join(row) for row in rows]
    (tmp_path / "images.csv").write_text("\n".join(lines) + "\n")


ROWS = [
    ("img/10_a.jpg", "10", "train"), ("img/10_b.jpg", "10", "train"), ("img/2_a.jpg", "2", "train"),
    ("img/7_a.jpg", "7", "test"), ("img/7_b.jpg", "7", "test"), ("img/7_c.jpg", "7", "test"),
    ("img/8_a.jpg", "8", "test"), ("img/8_b.jpg", "8", "test"),
]


def test_csv_splits_numeric_labels_and_leave_one_out_without_flags(build, trees, tmp_path):
    _csv_tree(trees, tmp_path, ("path", "label", "split"), ROWS)
    bundle = build("csv", root=str(tmp_path))
    assert bundle.train.class_names == ["2", "10"]  # numeric order, not "10" < "2"
    assert bundle.train.labels.tolist() == [1, 1, 0]
    assert bundle.test.class_names == ["7", "8"] and len(bundle.test) == 5
    assert bundle.test_query_mask is None and bundle.test_gallery_mask is None


def test_csv_query_and_gallery_flags(build, trees, tmp_path):
    flags = [("", ""), ("", ""), ("", ""), ("1", "0"), ("0", "1"), ("no", "yes"), ("true", "false"), ("0", "1")]
    rows = [(*r, *f) for r, f in zip(ROWS, flags, strict=True)]
    _csv_tree(trees, tmp_path, ("path", "label", "split", "query", "gallery"), rows)
    bundle = build("csv", root=str(tmp_path))
    assert bundle.test_query_mask.tolist() == [True, False, False, True, False]
    assert bundle.test_gallery_mask.tolist() == [False, True, True, False, True]


def test_csv_only_query_column_makes_the_gallery_its_complement(build, trees, tmp_path):
    rows = [(*r, q) for r, q in zip(ROWS, ["", "", "", "1", "", "", "yes", "0"], strict=True)]
    _csv_tree(trees, tmp_path, ("path", "label", "split", "query"), rows)
    bundle = build("csv", root=str(tmp_path))
    assert np.array_equal(bundle.test_gallery_mask, ~bundle.test_query_mask)
    assert bundle.test_query_mask.tolist() == [True, False, False, True, False]


def test_csv_orphan_query_class_and_bad_values(build, trees, tmp_path):
    flags = ["", "", "", "1", "1", "1", "0", "0"]  # every image of class 7 is a query: none in the gallery
    _csv_tree(trees, tmp_path, ("path", "label", "split", "query"), [(*r, q) for r, q in zip(ROWS, flags, strict=True)])
    with pytest.raises(DataError, match="query classes have no image in the gallery"):
        build("csv", root=str(tmp_path))
    rows = [(*ROWS[0], "maybe"), *[(*r, "") for r in ROWS[1:]]]
    _csv_tree(trees, tmp_path, ("path", "label", "split", "query"), rows)
    with pytest.raises(DataError, match="flag 'maybe' on line 2"):
        build("csv", root=str(tmp_path))
    _csv_tree(trees, tmp_path, ("path", "label", "split"), [*ROWS, ("img/x.jpg", "1", "holdout")])
    with pytest.raises(DataError, match="split 'holdout' on line 10"):
        build("csv", root=str(tmp_path))


def test_csv_columns_val_rows_and_missing_files(build, trees, tmp_path):
    _csv_tree(trees, tmp_path, ("file", "class", "subset"), [*ROWS, ("img/3_a.jpg", "3", "val")])
    with pytest.raises(DataError, match="has no column 'path'"):
        build("csv", root=str(tmp_path))
    options = {"path_column": "file", "label_column": "class", "split_column": "subset"}
    bundle = build("csv", root=str(tmp_path), **options)
    assert bundle.val.class_names == ["3"] and bundle.info["val_images"] == 1
    with pytest.raises(DataError, match="has 'val' rows and val_classes"):
        build("csv", root=str(tmp_path), val_classes=1, **options)
    (tmp_path / "img" / "8_b.jpg").unlink()
    with pytest.raises(DataError, match=r"1 of 5 listed image files do not exist:\n.*8_b\.jpg"):
        build("csv", root=str(tmp_path), **options)
    with pytest.raises(DataError, match=r"expected file .*other\.csv is missing"):
        build("csv", root=str(tmp_path), file="other.csv")
