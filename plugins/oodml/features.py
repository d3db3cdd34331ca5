"""Split generation from a registered dataset: features -> class means -> candidates -> split file.

``dmlplug oodml splits`` calls :func:`generate_splits`: every image of the dataset (train ∪ test, and
validation when the dataset has one) goes through a timm feature extractor, per-class means are
swapped and removed (:mod:`dmlplug_builtins.oodml.swapping`), ``num_splits`` candidates are chosen evenly over
the FID range and written as a split file with validation partitions and few-shot episodes.

torch and timm are imported inside the functions.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.errors import DataError


@dataclass
class ExtractorSpec:
    """The feature extractor of split generation.

    Either a timm ``model`` with local ``weights`` (random without), or the trained backbone of a dmlplug
    ``run`` (a run directory or checkpoint), which then brings its own test transform: ``model``, ``weights``,
    ``image_size`` and ``resize_size`` are not used.
    """

    model: str = "resnet50"
    weights: str | None = None
    run: str | None = None
    image_size: int = 224
    resize_size: int | None = None
    batch_size: int = 64
    device: str = "cpu"
    workers: int = 0


def build_dataset(name: str, params: Mapping[str, Any] | None = None) -> Any:
    """Build a registered dataset component from its name and parameters.

    Raises:
        ComponentError: Unknown dataset or invalid parameters.
    """
    import dmlplug

    return dmlplug.create("dataset", name, **dict(params or {}))


@dataclass
class Extractor:
    """A built feature extractor: the backbone, its transform (None: from the spec) and its provenance."""

    backbone: Any
    transform: Any
    info: dict[str, Any]


def build_extractor(spec: ExtractorSpec) -> Extractor:
    """The extractor backbone (``(pooled, feature map)`` forward), its transform and what the split file records.

    A run's trained backbone with the run's test transform; else a timm backbone with local weights, or
    with random weights and a warning.

    Raises:
        ComponentError: Unknown model or unreadable weights.
        DataError: ``spec.run`` is not a readable dmlplug run or checkpoint.
    """
    import dmlplug

    if spec.run:
        from dmlplug.files import sha256_file

        loaded = dmlplug.load_run(spec.run, device=spec.device)
        info = {"backbone": "run", "extractor_run": str(Path(spec.run).resolve()),
                "extractor_checkpoint": loaded.checkpoint.name,
                "extractor_checkpoint_sha256": sha256_file(loaded.checkpoint),
                "image_size": loaded.recipe.data.image_size}
        return Extractor(loaded.model.backbone.eval(), loaded.test_transform, info)
    if not spec.weights:
        message = (f"ooDML splits from a randomly initialised {spec.model}: FIDs of random features do not "
                   "measure semantic shift; give --weights FILE (e.g. ImageNet weights) for real benchmarks")
        warnings.warn(message, UserWarning, stacklevel=2)
    backbone = dmlplug.create("backbone", "timm", model=spec.model, pretrained=spec.weights or False,
                              device=spec.device)
    backbone.to(spec.device).eval()
    return Extractor(backbone, None, timm_provenance(spec))


def timm_provenance(spec: ExtractorSpec) -> dict[str, Any]:
    """What the split file's ``info`` records of a timm extractor."""
    return {"backbone": spec.model, "weights": str(Path(spec.weights).name) if spec.weights else None,
            "image_size": spec.image_size}


def class_feature_sums(backbone: Any, sources: Sequence[Any], labels: Sequence[np.ndarray], num_classes: int,
                       spec: ExtractorSpec, *, augment: str = "dml", transform: Any = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Per-class sums (float64, ``C×F``) and counts of the pooled features of every image of ``sources``.

    Features are summed as they are computed, so memory does not grow with the number of images
    (SOP: 120k images). ``labels[i]`` gives the class index of every image of ``sources[i]``. ``transform``
    (default: the test transform of ``augment`` at the spec's sizes) prepares the images.
    """
    import torch

    from dmlplug.data.transforms import build_transform
    from dmlplug_builtins.oodml.images import image_loader

    if transform is None:
        transform = build_transform("test", augment=augment, image_size=spec.image_size,
                                    resize_size=spec.resize_size)
    sums: torch.Tensor | None = None
    counts = np.zeros(num_classes, dtype=np.int64)
    with torch.no_grad():
        for source, source_labels in zip(sources, labels, strict=True):
            loader = image_loader(source, transform, batch_size=spec.batch_size, workers=spec.workers,
                                  device=spec.device)
            for images, _, indices in loader:
                features = backbone(images.to(spec.device))[0].double().cpu()
                if sums is None:
                    sums = torch.zeros(num_classes, features.shape[1], dtype=torch.float64)
                batch_labels = torch.as_tensor(source_labels[indices.numpy()])
                sums.index_add_(0, batch_labels, features)
                np.add.at(counts, batch_labels.numpy(), 1)
    if sums is None:
        raise DataError("the dataset has no images")
    return sums.numpy(), counts


def dataset_class_means(bundle: Any, backbone: Any, spec: ExtractorSpec, *, transform: Any = None
                        ) -> dict[str, Any]:
    """Class names, per-class mean features and counts over the union of the bundle's splits.

    ``transform`` prepares the images (default: the test transform the spec's sizes give).

    Returns:
        ``{"class_names", "means", "counts", "train", "test", "images_by_class", "feature_dim"}`` where
        ``train``/``test`` are the class indices of the dataset's default split (validation classes count
        as train).

    Raises:
        DataError: A class name appears in two splits, or a class has no image.
    """
    from dmlplug.data.splits import bundle_sources, union_by_class

    sources = bundle_sources(bundle)
    names: list[str] = []
    side: list[str] = []
    for position, source in enumerate(sources):
        for cls in source.class_names:
            if cls in names:
                raise DataError(f"class {cls!r} appears in two splits of the dataset; ooDML needs class-disjoint "
                                "splits", fix="use the dataset's class-disjoint (zero-shot) split")
            names.append(cls)
            side.append("test" if position == 1 else "train")
    index = {c: i for i, c in enumerate(names)}
    labels = [np.asarray([index[s.class_names[y]] for y in s.labels.tolist()], dtype=np.int64) for s in sources]
    sums, counts = class_feature_sums(backbone, sources, labels, len(names), spec,
                                      augment=getattr(bundle, "default_augment", "dml"), transform=transform)
    if (counts == 0).any():
        raise DataError(f"class {names[int(np.argmin(counts))]!r} has no image; every class needs a mean feature")
    _, ids = union_by_class(sources)
    return {
        "class_names": names,
        "means": sums / counts[:, None],
        "counts": counts,
        "train": [i for i, s in enumerate(side) if s == "train"],
        "test": [i for i, s in enumerate(side) if s == "test"],
        "images_by_class": ids,
        "feature_dim": int(sums.shape[1]),
    }


def generate_splits(
    dataset: str,
    dataset_params: Mapping[str, Any] | None = None,
    *,
    extractor: ExtractorSpec | None = None,
    num_splits: int = 8,
    swaps_per_iter: int = 2,
    iterations: int = 25,
    history: int = 5,
    inverse_iterations: int = 0,
    removal: bool = True,
    min_remaining: float = 0.5,
    val_fraction: float = 0.25,
    shots: Sequence[int] = (2, 5, 10),
    episodes: int = 10,
    seed: int = 0,
    bundle: Any = None,
    backbone: Any = None,
) -> Any:
    """Generate an ooDML split file for a registered dataset (docs/oodml.md).

    Args:
        dataset: Registered dataset name.
        dataset_params: Its parameters.
        extractor: Feature extractor settings (default: random resnet50, with a warning).
        num_splits: Splits to select, evenly over the FID range (the default split and both extremes kept).
        swaps_per_iter: Classes exchanged per swapping iteration.
        iterations: Swapping iterations.
        history: Swap history length.
        inverse_iterations: Iterations of the inverse (easier-split) run; 0 for none.
        removal: Continue with class removal after swapping.
        min_remaining: Fraction of each side's images removal keeps.
        val_fraction: Share of each split's train classes in ``split_val``.
        shots: Few-shot support sizes stored in the file.
        episodes: Episodes per support size.
        seed: Seed of partitions and episodes.
        bundle: An already built dataset bundle (skips building ``dataset``).
        backbone: An already built extractor (skips building it; tests count its calls).

    Returns:
        The :class:`~dmlplug_builtins.oodml.splitfile.SplitFile`.
    """
    from dmlplug_builtins.oodml.assemble import build_split_file
    from dmlplug_builtins.oodml.selection import select_evenly
    from dmlplug_builtins.oodml.swapping import generate_candidates

    spec = extractor or ExtractorSpec()
    if bundle is None:
        bundle = build_dataset(dataset, dataset_params)
    built = build_extractor(spec) if backbone is None else Extractor(backbone, None, timm_provenance(spec))
    table = dataset_class_means(bundle, built.backbone, spec, transform=built.transform)
    if min(len(table["train"]), len(table["test"])) < 2:
        raise DataError("the dataset's default split needs at least two train and two test classes")
    candidates = generate_candidates(
        table["means"], table["counts"], table["train"], table["test"], swaps_per_iter=swaps_per_iter,
        iterations=iterations, history=history, inverse_iterations=inverse_iterations, removal=removal,
        min_remaining=min_remaining)
    selected = select_evenly(candidates, num_splits)
    info = {
        "dataset_params": dict(dataset_params or {}),
        **built.info,
        "feature_dim": table["feature_dim"],
        "features": "pooled backbone features, class means over train ∪ test",
        "swaps_per_iter": swaps_per_iter, "iterations": iterations, "history": history,
        "inverse_iterations": inverse_iterations, "removal": removal, "min_remaining": min_remaining,
        "candidates": len(candidates), "seed": seed,
    }
    return build_split_file(selected, table["class_names"], table["images_by_class"], dataset=dataset,
                            val_fraction=val_fraction, shots=shots, episodes=episodes, seed=seed, info=info)
