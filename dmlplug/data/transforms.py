"""Image transforms of the DML protocol (METHODS.md §9.1) and a light variant for small images."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

AUGMENTATIONS = ("dml", "light", "none")


def build_transform(
    mode: str, *, augment: str, image_size: int, resize_size: int | None = None
) -> Callable[[Any], Any]:
    """Return a PIL-image -> normalised tensor transform.

    Args:
        mode: ``"train"`` or ``"test"``.
        augment: ``"dml"``: random-resized-crop (torchvision defaults) + horizontal flip for training,
            resize of the shorter side + centre crop for testing; ``"light"``: a mild random-resized crop
            (scale 0.7–1, no flip — glyphs are not mirror-symmetric) for training and a plain resize for
            testing; ``"none"``: the test transform in both modes.
        image_size: Output side length.
        resize_size: Shorter-side resize before the centre crop (``dml`` test mode); defaults to
            ``round(image_size * 256 / 224)`` as in the standard protocol (256 for 224).
    """
    from torchvision import transforms as T

    if augment not in AUGMENTATIONS:
        raise ValueError(f"augment must be one of {AUGMENTATIONS}, got {augment!r}")
    normalize = [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    train = mode == "train" and augment != "none"
    if augment == "dml" or (augment == "none" and resize_size is not None):
        if train:
            return T.Compose([T.RandomResizedCrop(image_size), T.RandomHorizontalFlip(), *normalize])
        resize = resize_size or round(image_size * 256 / 224)
        return T.Compose([T.Resize(resize), T.CenterCrop(image_size), *normalize])
    if train:
        return T.Compose([T.RandomResizedCrop(image_size, scale=(0.7, 1.0), ratio=(0.9, 1.1)), *normalize])
    return T.Compose([T.Resize((image_size, image_size)), *normalize])
