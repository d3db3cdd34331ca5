"""The test-time preprocessing of a run, as data in ``bundle.json`` and back as a transform.

A bundle must preprocess a query exactly as evaluation did, and a user of another language must be able to
reproduce it from ``bundle.json`` alone. :func:`describe_transform` reads the run's test transform (the
torchvision ``Compose`` that :func:`dmlplug.data.transforms.build_test_transform` builds, whatever the run's
augmentation policy: evaluation's transform is the engine's) into a plain dict;
:func:`build_preprocess` builds a transform computing the same from that dict (the lean
:class:`~dmlplug.data.image_ops.TensorPipeline` for the engine's evaluation view, the ``Compose`` itself
otherwise), so a bundle and its run directory give bit-identical input tensors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dmlplug.bundle.errors import BundleError


def describe_transform(transform: Any) -> dict[str, Any]:
    """The steps of a test transform as a JSON-ready dict.

    Both torchvision APIs are read: the classic one (PIL resize, then ``ToTensor``) and ``transforms.v2``
    (``ToImage`` to a uint8 tensor, tensor resize, ``ToDtype(float32, scale=True)``); the two resize
    differently by a few grey levels, so the spec records which one the run used.

    Returns:
        ``{"steps": [...], "input_size": [3, H, W], "resize", "crop", "mean", "std"}`` (``resize`` and ``crop``
        repeat the sizes of those steps, ``None`` when absent). Steps, applied in order: ``to_image`` (RGB
        uint8 ``3×H×W`` tensor), ``resize`` (``size``: an int resizes the shorter side, ``[h, w]`` both;
        ``interpolation``, ``antialias``, ``max_size``), ``center_crop`` (``size``), ``to_float`` (uint8 / 255),
        ``to_tensor`` (PIL RGB to a 0–1 float tensor), ``normalize`` (``mean``, ``std``), ``to_pure_tensor``
        (drops torchvision's tensor subclass; no arithmetic).

    Raises:
        BundleError: The transform holds a step that cannot be described (a run with a custom transform).
    """
    steps = [_describe_step(step) for step in getattr(transform, "transforms", [transform])]
    resize = next((s["size"] for s in steps if s["op"] == "resize"), None)
    crop = next((s["size"] for s in steps if s["op"] == "center_crop"), None)
    return {"steps": steps, "input_size": [3, *_output_size(steps)], "resize": resize, "crop": crop,
            **_normalisation(steps)}


def _describe_step(step: Any) -> dict[str, Any]:
    import torch
    from torchvision import transforms as T
    from torchvision.transforms import v2

    if isinstance(step, T.Resize | v2.Resize):
        size = step.size if isinstance(step.size, int) else [int(s) for s in step.size]
        if isinstance(size, list) and len(size) == 1:
            size = size[0]
        return {"op": "resize", "size": size, "interpolation": getattr(step.interpolation, "value", step.interpolation),
                "max_size": step.max_size, "antialias": bool(step.antialias)}
    if isinstance(step, T.CenterCrop | v2.CenterCrop):
        size = [int(s) for s in step.size] if not isinstance(step.size, int) else [step.size, step.size]
        return {"op": "center_crop", "size": size * 2 if len(size) == 1 else size}
    if isinstance(step, T.ToTensor):
        return {"op": "to_tensor"}
    if isinstance(step, v2.ToImage):
        return {"op": "to_image"}
    if isinstance(step, v2.ToDtype) and step.dtype in (torch.float32, {torch.Tensor: torch.float32}) and step.scale:
        return {"op": "to_float"}
    if isinstance(step, v2.ToPureTensor):
        return {"op": "to_pure_tensor"}
    if isinstance(step, T.Normalize | v2.Normalize):
        return {"op": "normalize", "mean": [float(m) for m in step.mean], "std": [float(s) for s in step.std]}
    raise BundleError(f"the run's test transform has a step that a bundle cannot describe: {step!r}",
                      fix="export a run whose test transform is resize / center crop / to tensor / normalize "
                      "(the engine's evaluation transform always is)")


def _output_size(steps: list[dict[str, Any]]) -> list[int]:
    for step in reversed(steps):
        if step["op"] == "center_crop" or (step["op"] == "resize" and isinstance(step["size"], list)):
            return list(step["size"])
    raise BundleError("the run's test transform gives no fixed image size (no crop, no resize to h×w)",
                      fix="give the run a centre crop or a fixed-size resize in its test transform")


def _normalisation(steps: list[dict[str, Any]]) -> dict[str, Any]:
    for step in steps:
        if step["op"] == "normalize":
            return {"mean": step["mean"], "std": step["std"]}
    return {"mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]}


def build_preprocess(spec: dict[str, Any]) -> Any:
    """A transform computing what ``spec`` (from :func:`describe_transform`) describes.

    The engine's evaluation view becomes a :class:`~dmlplug.data.image_ops.TensorPipeline`; any other spec with a
    ``to_image`` step is rebuilt with ``transforms.v2``, one without with the classic API, as the run's own
    transform was. Either way the tensors are identical.

    Raises:
        BundleError: An unknown step (a bundle written by a newer dmlplug), or a step without its keys.
    """
    from torchvision import transforms as T
    from torchvision.transforms import v2

    try:
        lean = _lean_pipeline(spec["steps"])
        if lean is not None:
            return lean
        api = v2 if any(step.get("op") == "to_image" for step in spec["steps"]) else T
        built = [_build_step(step, api) for step in spec["steps"]]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a step without its keys, a bad value
        raise BundleError(f"bundle.json's preprocessing is damaged: {type(exc).__name__}: {exc}",
                          fix="export the bundle again: dmlplug export RUN_DIR --out BUNDLE_DIR") from None
    return api.Compose(built)


def _lean_pipeline(steps: list[dict[str, Any]]) -> Any:
    """The :class:`~dmlplug.data.image_ops.TensorPipeline` equal to ``steps``, or ``None`` when it has no equal.

    The engine's evaluation view is always such a spec (``to_image``, bilinear antialiased ``resize``, optional
    ``center_crop``, ``to_float``, ``normalize``, ``to_pure_tensor``); the pipeline computes the same tensors
    bit for bit without ``transforms.v2``'s per-call dispatch, which costs more than the arithmetic on small
    images (tests/bundle/test_preprocess.py compares the two).
    """
    from dmlplug.data.image_ops import CenterCrop, Resize, TensorPipeline

    ops = [step.get("op") for step in steps]
    if ops[:1] != ["to_image"] or ops[-1:] != ["to_pure_tensor"] or ops[-3:-1] != ["to_float", "normalize"]:
        return None
    geometry: list[Any] = []
    for step in steps[1:-3]:
        if step["op"] == "center_crop":
            geometry.append(CenterCrop(list(step["size"])))
        elif (step["op"] == "resize" and step.get("interpolation") == "bilinear" and step.get("antialias", True)
              and step.get("max_size") is None):
            geometry.append(Resize(step["size"]))
        else:
            return None
    return TensorPipeline(geometry, mean=steps[-2]["mean"], std=steps[-2]["std"])


def _build_step(step: dict[str, Any], api: Any) -> Any:
    """The torchvision transform of one step of a spec (``api``: ``transforms`` or ``transforms.v2``).

    Raises:
        BundleError: An unknown step (a bundle written by a newer dmlplug).
    """
    import torch
    from torchvision import transforms as T
    from torchvision.transforms import v2

    op = step.get("op")
    if op == "resize":
        size = step["size"] if isinstance(step["size"], int) else list(step["size"])
        return api.Resize(size, interpolation=T.InterpolationMode(step["interpolation"]),
                          max_size=step.get("max_size"), antialias=step.get("antialias", True))
    if op == "center_crop":
        return api.CenterCrop(list(step["size"]))
    if op == "to_tensor":
        return T.ToTensor()
    if op == "to_image":
        return v2.ToImage()
    if op == "to_float":
        return v2.ToDtype(torch.float32, scale=True)
    if op == "to_pure_tensor":
        return v2.ToPureTensor()
    if op == "normalize":
        return api.Normalize(step["mean"], step["std"])
    raise BundleError(f"unknown preprocessing step {op!r} in bundle.json",
                      fix="use the dmlplug version that wrote the bundle, or export it again")


def _split_steps(transform: Any) -> tuple[list[Any], list[Any]]:
    """The steps to run per image (up to the first that makes a tensor) and the steps to run per batch."""
    from torchvision import transforms as T
    from torchvision.transforms import v2

    steps = list(getattr(transform, "transforms", [transform]))
    for number, step in enumerate(steps):
        if isinstance(step, v2.ToImage | T.ToTensor):
            return steps[:number + 1], steps[number + 1:]
    return steps, []  # no step makes a tensor: all run per image, as the Compose would


def preprocess_batch(transform: Any, images: Sequence[Any]) -> np.ndarray:
    """``transform`` applied to every image, as a float32 ``B×C×H×W`` array equal to stacking ``transform(image)``.

    The steps up to the one that turns a PIL image into a tensor (``ToImage`` or ``ToTensor``; a
    :class:`~dmlplug.data.image_ops.TensorPipeline`'s geometry) run per image; the steps after it (resize, crop,
    dtype, normalisation) take a ``B×C×H×W`` stack as well and run once per group of images of one size, for
    bit-identical numbers (tests/bundle/test_preprocess.py). A pipeline's RGB image that its geometry would leave
    as it is (already the model's size) goes from Pillow to numpy without torch, and the pipeline's conversion and
    normalisation run in numpy: a third of the time at 32 px, and far fewer GIL hand-overs in a server's batch
    thread (:meth:`~dmlplug.data.image_ops.TensorPipeline.normalise_array`).

    Args:
        transform: A bundle's preprocessing (a ``TensorPipeline`` or a torchvision ``Compose``; any other callable
            runs per image).
        images: PIL images, of any sizes.
    """
    from dmlplug.data.image_ops import TensorPipeline

    if isinstance(transform, TensorPipeline):
        return _stacked(images, functools.partial(_pipeline_pixels, transform), transform.normalise_array)
    import torch

    each, together = _split_steps(transform)

    def per_image(image: Any) -> np.ndarray:
        for step in each:
            image = step(image)
        return np.asarray(image)

    def per_batch(batch: np.ndarray) -> np.ndarray:
        tensor = torch.from_numpy(batch)
        for step in together:
            tensor = step(tensor)
        return np.asarray(tensor)

    return _stacked(images, per_image, per_batch)


def _pipeline_pixels(pipeline: Any, image: Any) -> np.ndarray:
    """``image`` after ``pipeline``'s geometry as a ``C×H×W`` uint8 array (numpy alone when the geometry keeps it)."""
    from PIL import Image

    if isinstance(image, Image.Image) and image.mode == "RGB" and pipeline.keeps(image.height, image.width):
        return np.asarray(image).transpose(2, 0, 1)
    return pipeline.geometry(image).numpy()


def _stacked(images: Sequence[Any], per_image: Callable[[Any], np.ndarray],
             per_batch: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``per_batch`` of the stacked ``per_image`` arrays, stacked by size (a resize needs one size per batch)."""
    arrays = [per_image(image) for image in images]
    groups: dict[tuple[int, ...], list[int]] = {}
    for number, array in enumerate(arrays):
        groups.setdefault(array.shape, []).append(number)
    if len(groups) == 1:  # the usual case: no second copy
        return per_batch(np.stack(arrays))
    out: list[Any] = [None] * len(arrays)
    for members in groups.values():
        batch = per_batch(np.stack([arrays[number] for number in members]))
        for row, number in enumerate(members):
            out[number] = batch[row]
    return np.stack(out)
