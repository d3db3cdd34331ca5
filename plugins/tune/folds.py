"""Class-disjoint cross-validation folds over a dataset's training classes (dataset ``tune_fold``).

The Reality-Check protocol (Musgrave et al., ECCV 2020) tunes on the training classes only: they are dealt into
``k`` class-disjoint folds, and fold ``i`` validates a model trained on the others. The wrapped dataset's test
classes are dropped from the bundle altogether, so no run of the search can load, evaluate or select on them:
the fold is the bundle's validation split *and* its test split.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dmlplug.errors import DataError


def fold_assignment(class_names: Sequence[str], folds: int, seed: int) -> list[list[str]]:
    """Deal ``class_names`` into ``folds`` class-disjoint folds, deterministically from ``seed``.

    The names are sorted first, so the folds depend on the set of classes and the seed only (not on the order
    the dataset lists them in); a seeded permutation is then dealt round-robin, so fold sizes differ by one at
    most.

    Args:
        class_names: The training classes.
        folds: Number of folds (at least 2).
        seed: Seed of the permutation.

    Returns:
        ``folds`` lists of class names, each sorted.

    Raises:
        DataError: Fewer classes than ``2 * folds`` (each fold's training and validation side needs two).
    """
    names = sorted(set(class_names))
    if len(names) < 2 * folds:
        raise DataError(f"{len(names)} training classes cannot be dealt into {folds} folds of at least 2 classes",
                        where="data.dataset (tune_fold)", fix="use fewer folds (--folds) or more classes")
    order = np.random.default_rng(seed).permutation(len(names))
    dealt: list[list[str]] = [[] for _ in range(folds)]
    for position, index in enumerate(order.tolist()):
        dealt[position % folds].append(names[index])
    return [sorted(fold) for fold in dealt]


def select_fold(bundle: Any, folds: int, fold: int, seed: int) -> Any:
    """``bundle`` re-partitioned to fold ``fold``: train on the other folds, validate (and "test") on it.

    The training classes are those of the wrapped bundle's ``train`` and ``val`` splits; its test split is
    dropped.

    Args:
        bundle: The wrapped dataset's :class:`~dmlplug.data.DatasetBundle`.
        folds: Number of folds.
        fold: The validation fold, ``0 <= fold < folds``.
        seed: Seed of the assignment (:func:`fold_assignment`).

    Returns:
        A new bundle; ``info["tune_fold"]`` records ``folds``, ``fold``, ``seed`` and the validation classes.
    """
    from dmlplug.data import DatasetBundle
    from dmlplug.data.splits import split_by_class_names

    training = list(bundle.train.class_names)
    if bundle.val is not None:
        training += list(bundle.val.class_names)
    dealt = fold_assignment(training, folds, seed)
    validation = dealt[fold]
    kept = [name for i, part in enumerate(dealt) if i != fold for name in part]
    # Only the training-side sources are pooled: the test split's images are never read.
    training_side = DatasetBundle(train=bundle.train, test=_empty_like(bundle.train), val=bundle.val,
                                  default_augment=bundle.default_augment, info=dict(bundle.info))
    selected = split_by_class_names(training_side, kept, validation, where="data.dataset (tune_fold)")
    selected.val = selected.test
    selected.info["tune_fold"] = {"folds": folds, "fold": fold, "seed": seed, "val_classes": validation}
    return selected


def _empty_like(source: Any) -> Any:
    """No images of ``source``: the pooled test side when the wrapped dataset has no validation split."""
    return source.subset(np.zeros(0, dtype=np.int64), name=f"{source.name}/none")
