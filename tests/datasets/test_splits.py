"""Class-disjoint splits, validation carving and query/gallery masks."""

from __future__ import annotations

import numpy as np
import pytest

from dmlplug.data import ArraySource
from dmlplug.data.splits import carve_validation, class_count, query_gallery_masks, split_by_class_order
from dmlplug.errors import DataError


def _array_source(labels, name="toy/train"):
    labels = np.asarray(labels)
    images = np.zeros((len(labels), 4, 4), dtype=np.uint8)
    images[:, 0, 0] = np.arange(len(labels))  # pixel (0, 0) remembers the original index
    return ArraySource(images, labels, [f"c{i}" for i in range(labels.max() + 1)], name=name)


@pytest.mark.parametrize(("spec", "classes", "expected"), [
    (0, 10, 0), (0.2, 10, 2), (0.25, 10, 2), (0.01, 10, 1), (3, 10, 3), (9, 10, 9), (1, 5, 1),
])
def test_class_count(spec, classes, expected):
    assert class_count(spec, classes, what="val_classes") == expected


@pytest.mark.parametrize("spec", [-0.1, 2.5, 10, 0.999])
def test_class_count_rejects_impossible_requests(spec):
    with pytest.raises(DataError, match="val_classes"):
        class_count(spec, 10, what="val_classes")


def test_split_by_class_order_gives_first_classes_to_the_first_split():
    labels = np.array([3, 0, 1, 2, 0, 3, 1])
    first, rest = split_by_class_order(_array_source(labels), 2, names=("t/train", "t/test"))
    assert first.name == "t/train" and rest.name == "t/test"
    assert first.class_names == ["c0", "c1"] and rest.class_names == ["c2", "c3"]
    kept = [int(np.asarray(first.load_image(i))[0, 0, 0]) for i in range(len(first))]
    assert kept == [1, 2, 4, 6]  # original indices of classes 0 and 1, order kept
    assert rest.labels.tolist() == [1, 0, 1]  # classes 3, 2, 3 re-indexed densely
    with pytest.raises(DataError, match="both splits need at least one class"):
        split_by_class_order(_array_source(labels), 4, names=("a", "b"))


def test_carve_validation_last_classes_is_class_disjoint_and_complete():
    labels = np.repeat(np.arange(10), [1, 2, 3, 1, 2, 3, 1, 2, 3, 1])
    train, val = carve_validation(_array_source(labels), 0.2)
    assert train.class_names == [f"c{i}" for i in range(8)] and val.class_names == ["c8", "c9"]
    assert len(train) + len(val) == len(labels) and len(val) == 4
    assert val.name == "toy/val" and train.name == "toy/train"
    assert set(train.labels.tolist()) == set(range(8)) and set(val.labels.tolist()) == {0, 1}


def test_carve_validation_random_is_seeded_and_disjoint():
    labels = np.repeat(np.arange(20), 2)
    _, val_a = carve_validation(_array_source(labels), 5, strategy="random", seed=3)
    train_b, val_b = carve_validation(_array_source(labels), 5, strategy="random", seed=3)
    _, val_c = carve_validation(_array_source(labels), 5, strategy="random", seed=4)
    assert val_a.class_names == val_b.class_names and val_a.num_classes == 5
    assert val_a.class_names != val_c.class_names  # another seed draws other classes (20 choose 5)
    assert not set(val_b.class_names) & set(train_b.class_names)


def test_carve_validation_zero_keeps_the_training_split():
    source = _array_source([0, 1, 1])
    train, val = carve_validation(source, 0)
    assert train is source and val is None


def test_query_gallery_masks_complete_missing_side_and_check():
    labels = np.array([0, 0, 1, 1, 2])
    q, g = query_gallery_masks(labels, [True, False, True, False, False], None)
    assert q.tolist() == [True, False, True, False, False] and g.tolist() == [False, True, False, True, True]
    q, g = query_gallery_masks(labels, None, [False, True, False, True, True])
    assert q.tolist() == [True, False, True, False, False]
    assert query_gallery_masks(labels, None, None) == (None, None)
    with pytest.raises(DataError, match="1 query classes have no image in the gallery"):
        query_gallery_masks(labels, [False, False, False, False, True], [True, True, True, True, False])
    with pytest.raises(DataError, match="0 queries"):
        query_gallery_masks(labels, [False] * 5, None)
