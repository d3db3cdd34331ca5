"""Class-disjoint splits: train/test by class order, validation carved from training classes, query/gallery.

Works on any :class:`~dmlplug.data.base.ImageSource`; a :class:`~dmlplug.data.image_files.FileImageSource`
keeps its type (and per-image attributes) through :meth:`~dmlplug.data.image_files.FileImageSource.select`.
:func:`check_split_sizes` is the smallest dataset a run accepts (:data:`MIN_SPLIT_CLASSES`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dmlplug.data.base import ImageSource
from dmlplug.errors import DataError
from dmlplug.params import MIN_SPLIT_CLASSES  # the minimum of a split (and why): defined with Params.split_sizes

if TYPE_CHECKING:
    from dmlplug.data.base import DatasetBundle

VAL_STRATEGIES = ("last", "random")

#: Images a class needs to be a query in leave-one-out evaluation: the query and one more to find.
MIN_QUERY_IMAGES = 2


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
                        fix=f"use a smaller {what} (a run needs {MIN_SPLIT_CLASSES} classes on each side of the split)")
    return count


def check_split_sizes(bundle: DatasetBundle, splits: Sequence[str] = ("train", "test"), *,
                      where: str = "[data.dataset]") -> None:
    """Refuse a split below the minimum a run needs: :data:`MIN_SPLIT_CLASSES` classes, or query classes.

    ``splits`` names the splits to check (absent ones are skipped): ``train`` needs that many classes; an
    evaluated one (``test``, ``val``) that many query classes (:func:`query_classes`; the test split's
    query/gallery masks apply). ``where`` says where the dataset comes from.

    Raises:
        DataError: A split is below the minimum; the message gives its counts.
    """
    for split in (s for s in splits if getattr(bundle, s, None) is not None):
        labels = np.asarray(getattr(bundle, split).labels, dtype=np.int64)
        masks = (bundle.test_query_mask, bundle.test_gallery_mask) if split == "test" else (None, None)
        found = len(np.unique(labels)) if split == "train" else len(query_classes(labels, *masks))
        if found >= MIN_SPLIT_CLASSES:
            continue
        if split == "train":
            what, why = f"{found} class", "a pair loss needs a negative"
        else:  # query classes: a query with another item of its class to find
            what = (f"{found} class with a query" if found else "no query") + " with another item of its class"
            why = "with one, every neighbour is of the query's class: recall 1.0 untrained"
        raise DataError(f"the {split} split of the dataset has {what} ({len(labels)} images), fewer than the "
                        f"{MIN_SPLIT_CLASSES} classes a run needs ({why})", where=f"{where}: {split} split",
                        fix=f"give the {split} split at least {MIN_SPLIT_CLASSES} classes of {MIN_QUERY_IMAGES} or "
                            "more images (the dataset's class counts or split parameters, or [data] train_classes "
                            "/ test_classes / val_classes)")


def query_classes(labels: np.ndarray, query: np.ndarray | None = None,
                  gallery: np.ndarray | None = None) -> np.ndarray:
    """The classes with a query that has another item of its class in the gallery (no masks: leave-one-out)."""
    labels = np.asarray(labels, dtype=np.int64)
    if query is None or gallery is None:
        classes, counts = np.unique(labels, return_counts=True)
        return classes[counts >= MIN_QUERY_IMAGES]
    q, g = np.asarray(query, dtype=bool), np.asarray(gallery, dtype=bool)
    # A query finds the gallery images of its class other than itself.
    others = np.bincount(labels[g], minlength=int(labels.max(initial=-1)) + 1)[labels[q]] - g[q]
    return np.unique(labels[q][others > 0])


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
            fix="check the number of training classes against the classes found on disk (a run needs "
                f"{MIN_SPLIT_CLASSES} classes on each side)",
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
    if q is None:
        assert g is not None  # neither given returned above
        q = ~g
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


# ----------------------------------------------------------------------------------------------
# Re-partitioning a dataset by class names (recipe class lists, ooDML splits)


class ClassSplitSource(ImageSource):
    """Images drawn from several sources (a bundle's splits), labelled by a given class order.

    Args:
        parts: The parent sources.
        items: ``(part, index)`` of every image, in order.
        class_names: Class names; ``labels[i]`` indexes this list.
        labels: Dense label of every image.
        image_ids: Stable identifier of every image (see :func:`image_ids`).
        name: Split name for messages.
    """

    def __init__(self, parts: Sequence[ImageSource], items: np.ndarray, class_names: Sequence[str],
                 labels: np.ndarray, image_ids: Sequence[str], name: str = ""):
        self.parts = list(parts)
        self.items = np.asarray(items, dtype=np.int64).reshape(-1, 2)
        self.class_names = list(class_names)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.image_ids = list(image_ids)
        self.name = name
        #: Per-image arrays carried over from the parent sources (see :func:`split_by_class_names`).
        self.attributes: dict[str, np.ndarray] = {}

    def load_image(self, index: int) -> object:
        """Image ``index``, loaded by the source it comes from."""
        part, inner = self.items[int(index)]
        return self.parts[int(part)].load_image(int(inner))

    def describe(self, index: int) -> str:
        """Where image ``index`` comes from."""
        part, inner = self.items[int(index)]
        return self.parts[int(part)].describe(int(inner))


def image_ids(source: ImageSource) -> list[str]:
    """A stable identifier for every image of ``source``, unique within its class.

    File sources give the file's basename (what the published ooDML split files list), or the path
    when basenames repeat within a class. Other sources (in-memory arrays) give ``img<k>``: the image's
    position among the images of its class, which is stable as long as the dataset's parameters are.
    Sources that already carry an ``image_ids`` attribute keep it.
    """
    known = getattr(source, "image_ids", None)
    if known is not None:
        return list(known)
    labels = np.asarray(source.labels)
    paths = getattr(source, "paths", None)
    if paths is not None:
        names = [p.replace("\\", "/").rsplit("/", 1)[-1] for p in paths]
        seen: set[tuple[int, str]] = set()
        for label, base in zip(labels.tolist(), names, strict=True):
            if (label, base) in seen:
                return [str(p) for p in paths]
            seen.add((label, base))
        return names
    counters: dict[int, int] = {}
    ids = []
    for label in labels.tolist():
        ids.append(f"img{counters.get(label, 0):05d}")
        counters[label] = counters.get(label, 0) + 1
    return ids


def union_by_class(sources: Sequence[ImageSource]) -> tuple[dict[str, list[tuple[int, int]]], dict[str, list[str]]]:
    """The images of several sources grouped by class name.

    Returns:
        ``(members, ids)``: class name -> ``(source position, index)`` of its images, and class name ->
        their image ids, both in source order then index order.

    Raises:
        DataError: Two images of one class share an id across sources.
    """
    members: dict[str, list[tuple[int, int]]] = {}
    ids: dict[str, list[str]] = {}
    for part, source in enumerate(sources):
        names = source.class_names
        for index, (label, image_id) in enumerate(zip(source.labels.tolist(), image_ids(source), strict=True)):
            cls = names[label]
            members.setdefault(cls, []).append((part, index))
            ids.setdefault(cls, []).append(image_id)
    return members, ids


def bundle_sources(bundle: DatasetBundle) -> list[ImageSource]:
    """The bundle's train, test and (when present) validation sources, in that order."""
    return [s for s in (bundle.train, bundle.test, getattr(bundle, "val", None)) if s is not None]


def split_by_class_names(
    bundle: DatasetBundle,
    train_classes: Sequence[str],
    test_classes: Sequence[str],
    val_classes: Sequence[str] | None = None,
    *,
    where: str = "[data]",
) -> DatasetBundle:
    """Rebuild a bundle's splits from the union of its images, by class name (ooDML splits).

    Labels follow the order of the given lists (the split files sort them by name, so label indices do
    not depend on how a split was made). Query/gallery masks of the original test split do not carry
    over: the new test split is evaluated leave-one-out.

    Args:
        bundle: A :class:`~dmlplug.data.base.DatasetBundle`.
        train_classes: Class names of the new training split.
        test_classes: Class names of the new test split.
        val_classes: Optional class names of a new validation split.
        where: Where the lists come from, for messages.

    Returns:
        A new :class:`~dmlplug.data.base.DatasetBundle` (same ``default_augment``, ``info`` extended).

    Raises:
        DataError: A class name is unknown, listed twice, or on two sides.
    """
    from dmlplug.data.base import DatasetBundle

    sources = bundle_sources(bundle)
    members, ids = union_by_class(sources)
    sides = {"train": list(train_classes), "test": list(test_classes)}
    if val_classes:
        sides["val"] = list(val_classes)
    owner: dict[str, str] = {}
    for side, classes in sides.items():
        if not classes:
            raise DataError(f"the {side} class list is empty", where=where, fix=f"list at least one {side} class")
        for cls in classes:
            if cls not in members:
                raise DataError(
                    f"unknown class name {cls!r} in the {side} classes{did_you_mean_class(cls, members)}",
                    where=where,
                    fix=f"the dataset has {len(members)} classes; check that the class list (or split file) "
                        "belongs to this dataset and its parameters",
                )
            if cls in owner:
                raise DataError(f"class {cls!r} is listed twice (in {owner[cls]} and {side})", where=where,
                                fix="train, test and validation classes must be distinct")
            owner[cls] = side
    base = str(bundle.train.name).split("/", 1)[0] or "data"
    new: dict[str, ClassSplitSource] = {}
    for side, classes in sides.items():
        items, labels, side_ids = [], [], []
        for label, cls in enumerate(classes):
            items.extend(members[cls])
            labels.extend([label] * len(members[cls]))
            side_ids.extend(ids[cls])
        new[side] = ClassSplitSource(sources, np.asarray(items), classes, np.asarray(labels), side_ids,
                                     name=f"{base}/{side}")
        new[side].attributes = _gather_attributes(sources, new[side].items)
    info = dict(getattr(bundle, "info", {}) or {})
    info["class_split"] = {side: {"classes": src.num_classes, "images": len(src)} for side, src in new.items()}
    return DatasetBundle(train=new["train"], test=new["test"], val=new.get("val"),
                         default_augment=getattr(bundle, "default_augment", "dml"), info=info)


def _gather_attributes(sources: Sequence[ImageSource], items: np.ndarray) -> dict[str, np.ndarray]:
    """Per-image attributes (e.g. SOP ``super_labels``) that every source has, gathered for ``items``."""
    tables = [getattr(s, "attributes", None) or {} for s in sources]
    common = set(tables[0]).intersection(*tables[1:]) if tables else set()
    return {key: np.asarray([tables[part][key][index] for part, index in items.tolist()])
            for key in sorted(common)}


def did_you_mean_class(name: str, classes: Iterable[str]) -> str:
    """A ' (did you mean ...?)' suffix among the dataset's class names."""
    from dmlplug.errors import did_you_mean

    return did_you_mean(name, list(classes))


def apply_recipe_classes(bundle: DatasetBundle, data: Any) -> DatasetBundle:
    """Apply a recipe's ``[data]`` class selection (``train_classes`` / ``test_classes`` / ``val_classes``).

    ooDML split files select classes through the dataset wrapper ``oodml_split`` of the ooDML plugin,
    which calls :func:`split_by_class_names` itself.

    Args:
        bundle: The bundle the dataset component built.
        data: The recipe's ``[data]`` section.

    The engine calls it on every dataset it builds, right after building it, and then checks the splits the run
    uses against the minimum (:func:`check_split_sizes`), before the sampler and the model are built.

    Returns:
        ``bundle`` unchanged when the recipe selects no classes, else the re-partitioned bundle.

    Raises:
        DataError: A class name is unknown, listed twice, or on two sides.
    """
    if getattr(data, "train_classes", None) is None:
        return bundle
    return split_by_class_names(bundle, data.train_classes, data.test_classes, data.val_classes or None,
                                where=RECIPE_CLASSES_WHERE)


#: Where the recipe's own class lists are, in messages.
RECIPE_CLASSES_WHERE = "[data] train_classes / test_classes / val_classes"
