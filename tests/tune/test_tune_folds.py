"""Class-disjoint folds over the training classes (dataset ``tune_fold``): a brute-force oracle on a toy bundle."""

import numpy as np
import pytest

from dmlplug.data import ArraySource, DatasetBundle
from dmlplug.errors import DataError
from dmlplug_builtins.tune.folds import fold_assignment, select_fold


def toy_bundle(with_val=False):
    """Training classes t00..t09 (+ v0, v1 as a validation split), test classes x0..x3; 2 images each."""
    def source(names, offset, name):
        labels = np.repeat(np.arange(len(names)), 2)
        images = (offset + np.arange(len(labels), dtype=np.uint8))[:, None, None].repeat(4, 1).repeat(4, 2)
        return ArraySource(images, labels, names, name=name)

    train = source([f"t{i:02d}" for i in range(10)], 0, "toy/train")
    test = source([f"x{i}" for i in range(4)], 100, "toy/test")
    val = source(["v0", "v1"], 200, "toy/val") if with_val else None
    return DatasetBundle(train=train, test=test, val=val, default_augment="light")


def test_fold_assignment_partitions_deterministically():
    names = [f"c{i}" for i in range(11)]
    folds = fold_assignment(names, 4, seed=3)
    flat = [n for fold in folds for n in fold]
    assert sorted(flat) == sorted(names) and len(set(flat)) == len(flat)  # a partition
    assert sorted(len(f) for f in folds) == [2, 3, 3, 3]  # sizes differ by one at most
    assert fold_assignment(list(reversed(names)), 4, seed=3) == folds  # order of the input does not matter
    assert fold_assignment(names, 4, seed=4) != folds  # the seed does
    with pytest.raises(DataError, match="cannot be dealt into 4 folds"):
        fold_assignment(names[:7], 4, seed=0)


@pytest.mark.parametrize("with_val", [False, True])
def test_select_fold_never_holds_test_classes(with_val):
    bundle = toy_bundle(with_val)
    training = [f"t{i:02d}" for i in range(10)] + (["v0", "v1"] if with_val else [])
    expected = fold_assignment(training, 3, seed=1)
    seen_val = []
    for fold in range(3):
        selected = select_fold(bundle, 3, fold, seed=1)
        assert selected.val is selected.test  # the fold is the validation and the only evaluated split
        assert sorted(selected.val.class_names) == expected[fold]
        assert sorted(selected.train.class_names) == sorted(set(training) - set(expected[fold]))
        pixels = {int(np.asarray(s.load_image(i))[0, 0, 0]) for s in (selected.train, selected.val)
                  for i in range(len(s))}
        assert all(p < 100 or p >= 200 for p in pixels)  # no image of a test class (pixels 100..107)
        assert len(pixels) == 2 * len(training)  # every training image is in train or val
        assert selected.info["tune_fold"]["val_classes"] == expected[fold]
        seen_val += selected.val.class_names
    assert sorted(seen_val) == sorted(training)  # every training class validates exactly once
