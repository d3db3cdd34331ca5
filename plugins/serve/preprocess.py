"""The bundle's own preprocessing, applied to a batch at once: the same torchvision steps, fewer calls.

A bundle's transform (``Bundle.transform``, built from ``bundle.json`` by dmlplug) is a ``Compose`` meant for one
image. Its steps up to the one that turns a PIL image into a tensor (``ToImage`` or ``ToTensor``) must run per
image; the steps after it (resize, crop, dtype, normalisation) take a ``B×C×H×W`` tensor as well, and run once per
batch of images of one size instead of once per image: a third of the time at 32 px, for bit-identical tensors
(tests/bundle/test_serve_parts.py compares them). Nothing here describes a step: the bundle's objects do the work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _split(transform: Any) -> tuple[list[Any], list[Any]]:
    """The steps to run per image (up to the first that makes a tensor) and the steps to run per batch."""
    from torchvision import transforms as T
    from torchvision.transforms import v2

    steps = list(getattr(transform, "transforms", [transform]))
    for number, step in enumerate(steps):
        if isinstance(step, v2.ToImage | T.ToTensor):
            return steps[:number + 1], steps[number + 1:]
    return steps, []  # no step makes a tensor: all run per image, as the Compose would


def preprocess_batch(transform: Any, images: Sequence[Any]) -> Any:
    """``transform`` applied to every image, as a ``B×C×H×W`` tensor equal to stacking ``transform(image)``.

    Args:
        transform: A bundle's preprocessing (a torchvision ``Compose``).
        images: PIL images, of any sizes.
    """
    import torch

    each, together = _split(transform)
    tensors = []
    for image in images:
        for step in each:
            image = step(image)
        tensors.append(image)
    groups: dict[tuple[int, ...], list[int]] = {}
    for number, tensor in enumerate(tensors):  # stacked by size: a resize needs one size per batch
        groups.setdefault(tuple(tensor.shape), []).append(number)
    out: list[Any] = [None] * len(tensors)
    for members in groups.values():
        batch = torch.stack([tensors[number] for number in members])
        for step in together:
            batch = step(batch)
        for row, number in enumerate(members):
            out[number] = batch[row]
    return torch.stack(out)
