"""Class-disjoint splits: train/test by class order, validation carved from training classes, query/gallery.

Works on any :class:`~dmlplug.data.base.ImageSource`; a :class:`~dmlplug.data.files.FileImageSource`
keeps its type (and per-image attributes) through :meth:`~dmlplug.data.files.FileImageSource.select`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dmlplug.data.base import ImageSource
from dmlplug.errors import DataError

VAL_STRATEGIES = ("last", "random")


def take(source: ImageSource, indices: np.ndarray, name: str) -> ImageSource:
    """Images ``indices`` of ``source`` as a new source with dense labels, keeping the source's type if it can."""
    select = getattr(source, "select", None)
    return select(indices, name=name) if select is not None else source.subset(indices, name=name)


def class_count(spec: float, num_classes: int, *, what: str) -> int:
    """Turn a class-count specification into a number of classes.

    Args:
        spec: A fraction in ``(0, 1)`` of ``num_classes``, or a whole count ``>= 1``; ``0`` means none.
        num_classes: The number of classes the fraction refers to.
        what: Name of the option, for messages (``"val_classes"``).

    Raises:
        DataError: ``spec`` is negative, a non-integer count, or not smaller than ``num_classes``.
    """
    if spec < 0 or (spec >= 1 and float(spec) != int(spec)):
        raise DataError(f"{what} = {spec} is neither a fraction in (0, 1) nor a whole number of classes",
                        fix=f"use e.g. {what} = 0.2 (a fifth of the classes) or {what} = 20")
    count = int(round(spec * num_classes)) if spec < 1 else int(spec)
    if spec > 0:
        count = max(count, 1)
    if count >= num_classes and spec > 0:
        raise DataError(f"{what} = {spec} asks for {count} of only {num_classes} classes; none would be left",
                        fix=f"use a smaller {what}")
    return count


def split_by_class_order(
    source: ImageSource, first_classes: int, names: tuple[str, str]
) -> tuple[ImageSource, ImageSource]:
    """Split into the images of the first ``first_classes`` labels and those of the rest.

    This is the zero-shot protocol of the benchmarks: CUB's first 100 classes train and the last 100
    test; CARS 98/98. Labels are in class order, so "first" means the smallest labels.

    Raises:
        DataError: One side would be empty.
    """
    if not 0 < first_classes < source.num_classes:
        raise DataError(
            f"cannot give {first_classes} of {source.num_classes} classes to {names[0]!r} and the rest to "
            f"{names[1]!r}: both splits need at least one class",
            where=source.name or None,
            fix="check the number of training classes against the classes found on disk",
        )
    is_first = source.labels < first_classes
    return (take(source, np.flatnonzero(is_first), names[0]),
            take(source, np.flatnonzero(~is_first), names[1]))


def carve_validation(
    train: ImageSource, val_classes: float, *, strategy: str = "last", seed: int = 0, name: str | None = None
) -> tuple[ImageSource, ImageSource | None]:
    """Hold some training classes out as a class-disjoint validation split.

    Args:
        train: The training split.
        val_classes: Fraction in ``(0, 1)`` or whole count of training classes to hold out; ``0`` keeps
            everything for training and returns ``None`` as the validation split.
        strategy: ``"last"``: the last classes in class order (the reference code trains on the first
            80 % of classes, ``--tv_split_perc 0.8``); ``"random"``: classes drawn with ``seed``, for
            datasets whose class order is not random (SOP classes are grouped by super-class).
        seed: Seed of the ``"random"`` draw.
        name: Name of the validation split; defaults to the training split's name with ``/val``.

    Returns:
        ``(train_without_val, val)``; labels of both are dense again.
    """
    if strategy not in VAL_STRATEGIES:
        raise ValueError(f"strategy must be one of {VAL_STRATEGIES}, got {strategy!r}")
    count = class_count(val_classes, train.num_classes, what="val_classes")
    if count == 0:
        return train, None
    if strategy == "last":
        held = np.arange(train.num_classes - count, train.num_classes)
    else:
        held = np.sort(np.random.default_rng(seed).choice(train.num_classes, size=count, replace=False))
    is_val = np.isin(train.labels, held)
    base = train.name.rsplit("/", 1)[0] if "/" in train.name else train.name
    return (take(train, np.flatnonzero(~is_val), train.name),
            take(train, np.flatnonzero(is_val), name or f"{base}/val"))


def query_gallery_masks(
    labels: np.ndarray,
    query: Sequence[bool] | np.ndarray | None,
    gallery: Sequence[bool] | np.ndarray | None,
    *,
    where: str = "",
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Complete and check query/gallery flags over an evaluation split.

    With only one of the two flags given, the other is its complement (the In-shop convention of
    disjoint query and gallery sets). With neither, ``(None, None)``: leave-one-out evaluation.

    Raises:
        DataError: No query, no gallery, or a query class that has no image in the gallery (its
            retrieval metrics would be undefined).
    """
    if query is None and gallery is None:
        return None, None
    q = None if query is None else np.asarray(query, dtype=bool)
    g = None if gallery is None else np.asarray(gallery, dtype=bool)
    q = ~g if q is None else q
    g = ~q if g is None else g
    labels = np.asarray(labels)
    if len(q) != len(labels) or len(g) != len(labels):
        raise ValueError("query/gallery flags and labels differ in length")
    if not q.any() or not g.any():
        raise DataError(f"the evaluation split has {int(q.sum())} queries and {int(g.sum())} gallery images",
                        where=where or None, fix="flag at least one image as query and one as gallery")
    orphan = np.setdiff1d(np.unique(labels[q]), np.unique(labels[g]))
    if len(orphan):
        raise DataError(
            f"{len(orphan)} query classes have no image in the gallery (labels {orphan[:5].tolist()} ...)",
            where=where or None,
            fix="put at least one image of every query class into the gallery",
        )
    return q, g
