"""FileImageSource: labels, missing files at construction, the decode-error policies."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from dmlplug.data.image_files import (
    FileImageSource,
    decode_image,
    find_missing,
    list_class_folders,
    list_image_files,
)
from dmlplug.errors import DataError


def _source(trees, tmp_path, per_class=(3, 2), **options):
    paths, keys = [], []
    for c, count in enumerate(per_class):
        for k in range(count):
            paths.append(trees.write_image(tmp_path / f"class{c}" / f"{k}.jpg", seed=c * 10 + k))
            keys.append(f"class{c}")
    return FileImageSource.from_class_keys(paths, keys, name="toy/train", **options)


def _pixels(image):
    return np.asarray(image)


def test_from_class_keys_orders_classes_and_densifies_labels(trees, tmp_path):
    paths = [trees.write_image(tmp_path / f"{i}.png", seed=i) for i in range(5)]
    source = FileImageSource.from_class_keys(paths, [30, 10, 30, 20, 10], class_order=[30, 20, 10, 99],
                                             class_names={30: "thirty"})
    assert source.class_names == ["thirty", "20", "10"]  # 99 is absent and dropped
    assert source.labels.tolist() == [0, 2, 0, 1, 2]
    assert source.labels.dtype == np.int64
    image = source.load_image(3)
    assert image.mode == "RGB" and image.size == (14, 10)
    assert source.describe(3) == str(paths[3])


def test_greyscale_and_cmyk_files_come_back_as_rgb(tmp_path):
    from PIL import Image

    Image.new("L", (8, 6), 200).save(tmp_path / "grey.jpg")
    Image.new("CMYK", (8, 6), (0, 255, 0, 0)).save(tmp_path / "cmyk.jpg")
    for name in ("grey.jpg", "cmyk.jpg"):
        assert decode_image(str(tmp_path / name)).mode == "RGB"


def test_missing_files_are_reported_at_construction_with_first_paths_and_count(trees, tmp_path):
    source = _source(trees, tmp_path)
    absent = [str(tmp_path / "gone" / f"{i}.jpg") for i in range(7)]
    with pytest.raises(DataError) as caught:
        FileImageSource(source.paths + absent, [0] * 12, ["a"], name="toy/test")
    message = str(caught.value)
    assert "7 of 12 listed image files do not exist" in message
    assert absent[0] in message and absent[4] in message and absent[5] not in message
    assert "and 2 more" in message and "toy/test" in message
    # the check can be switched off for file systems where listing is slow
    FileImageSource(source.paths + absent, [0] * 12, ["a"], check_files=False)


def test_find_missing_agrees_with_stat_per_file(trees, tmp_path):
    existing = [str(trees.write_image(tmp_path / d / f"{i}.jpg", seed=i)) for d in "ab" for i in range(3)]
    (tmp_path / "a" / "sub.jpg").mkdir()  # a directory is not an image file
    candidates = existing + [str(tmp_path / "a" / "9.jpg"), str(tmp_path / "c" / "0.jpg"),
                             str(tmp_path / "a" / "sub.jpg")]
    rng = np.random.default_rng(0)
    candidates = [candidates[i] for i in rng.permutation(len(candidates))]
    assert find_missing(candidates) == [p for p in candidates if not os.path.isfile(p)]


def test_fail_policy_names_the_undecodable_file(trees, tmp_path):
    source = _source(trees, tmp_path)
    trees.corrupt(tmp_path / "class0" / "1.jpg")
    with pytest.raises(DataError, match=r"cannot decode image .*class0/1\.jpg") as caught:
        source.load_image(1)
    assert "decode_errors" in str(caught.value)
    trees.truncate(tmp_path / "class1" / "0.jpg")
    with pytest.raises(DataError, match=r"class1/0\.jpg"):
        source.load_image(3)


def test_skip_policy_serves_the_next_image_of_the_same_class_and_counts(trees, tmp_path, caplog):
    source = _source(trees, tmp_path, per_class=(3, 2), decode_errors="skip")
    expected = _pixels(source.load_image(2))
    trees.corrupt(tmp_path / "class0" / "1.jpg")
    with caplog.at_level(logging.WARNING, logger="dmlplug.data"):
        served = source.load_image(1)
        again = source.load_image(1)
    assert np.array_equal(_pixels(served), expected) and np.array_equal(_pixels(again), expected)
    assert source.skipped == 1
    warnings = [r for r in caplog.records if "class0/1.jpg" in r.getMessage()]
    assert len(warnings) == 1  # logged once, not at every epoch


def test_skip_policy_wraps_around_and_passes_over_several_bad_files(trees, tmp_path):
    source = _source(trees, tmp_path, per_class=(4,), decode_errors="skip")
    first = _pixels(source.load_image(0))
    trees.corrupt(tmp_path / "class0" / "2.jpg")
    trees.truncate(tmp_path / "class0" / "3.jpg")
    assert np.array_equal(_pixels(source.load_image(3)), first)  # 3 -> (wrap) 0
    assert np.array_equal(_pixels(source.load_image(2)), first)  # 2 -> 3 (bad) -> 0
    assert source.skipped == 2


def test_skip_policy_fails_when_a_whole_class_is_undecodable(trees, tmp_path):
    source = _source(trees, tmp_path, per_class=(1, 2), decode_errors="skip")
    trees.corrupt(tmp_path / "class1" / "0.jpg")
    trees.corrupt(tmp_path / "class1" / "1.jpg")
    with pytest.raises(DataError, match="no image of class 'class1' can be decoded"):
        source.load_image(2)
    source.load_image(0)  # other classes are unaffected


def test_select_keeps_type_attributes_policy_and_re_indexes_labels(trees, tmp_path):
    paths = [trees.write_image(tmp_path / f"{i}.jpg", seed=i) for i in range(6)]
    source = FileImageSource(paths, [0, 1, 2, 2, 1, 0], ["a", "b", "c"], decode_errors="skip",
                             attributes={"super_labels": np.array([5, 6, 7, 8, 9, 10])})
    part = source.select(np.array([4, 2, 3]), name="part")
    assert isinstance(part, FileImageSource) and part.name == "part"
    assert part.class_names == ["b", "c"] and part.labels.tolist() == [0, 1, 1]
    assert part.attributes["super_labels"].tolist() == [9, 7, 8]
    assert part.paths == [str(paths[4]), str(paths[2]), str(paths[3])]
    assert part.decode_errors == "skip"


def test_folder_listing_skips_hidden_and_non_image_files(trees, tmp_path):
    trees.write_image(tmp_path / "b" / "2.JPG", seed=1)
    trees.write_image(tmp_path / "b" / "1.png", seed=2)
    (tmp_path / "b" / "._1.png").write_bytes(b"\x00\x05\x16\x07")  # macOS resource fork
    (tmp_path / "b" / "notes.txt").write_text("x")
    (tmp_path / "a").mkdir()
    (tmp_path / ".cache").mkdir()
    assert list_class_folders(tmp_path) == ["a", "b"]
    assert [os.path.basename(p) for p in list_image_files(tmp_path / "b")] == ["1.png", "2.JPG"]


def test_invalid_construction_arguments(trees, tmp_path):
    path = trees.write_image(tmp_path / "x.jpg", seed=0)
    with pytest.raises(ValueError, match="decode_errors"):
        FileImageSource([path], [0], ["a"], decode_errors="ignore")
    with pytest.raises(ValueError, match="labels"):
        FileImageSource([path], [0, 1], ["a", "b"])
    with pytest.raises(ValueError, match="index class_names"):
        FileImageSource([path], [3], ["a"])
