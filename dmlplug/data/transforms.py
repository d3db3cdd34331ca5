"""Image transforms of the DML protocol (docs/methods/revisiting.md) and extra augmented views.

No torch at module level: torchvision is imported when a transform is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

AUGMENTATIONS = ("dml", "light", "none")


def build_transform(
    mode: str, *, augment: str, image_size: int, resize_size: int | None = None
) -> Callable[[Any], Any]:
    """Return an image -> normalised float tensor transform (a ``torchvision.transforms.v2`` pipeline).

    The input is a PIL image or a ``C×H×W`` uint8 tensor (e.g. from ``torchvision.io.decode_jpeg``). The
    image is turned into a uint8 tensor first and cropped, resized (bilinear, antialiased) and flipped as a
    tensor, then converted to float and normalised: by measurement (``benchmarks/data_throughput.py``) the
    tensor kernels are faster than PIL's resize followed by ``ToTensor``, and the output of the crop is
    converted to float only once. Random draws come from torch's default generator, which
    :class:`dmlplug.engine.seeding.SeededDataset` seeds per sample.

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
    import torch
    from torchvision.transforms import v2

    if augment not in AUGMENTATIONS:
        raise ValueError(f"augment must be one of {AUGMENTATIONS}, got {augment!r}")
    to_uint8 = [v2.ToImage()]
    normalize = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
                 v2.ToPureTensor()]
    train = mode == "train" and augment != "none"
    if augment == "dml" or (augment == "none" and resize_size is not None):
        if train:
            steps = [v2.RandomResizedCrop(image_size, antialias=True), v2.RandomHorizontalFlip()]
        else:
            resize = resize_size or round(image_size * 256 / 224)
            steps = [v2.Resize(resize, antialias=True), v2.CenterCrop(image_size)]
    elif train:
        steps = [v2.RandomResizedCrop(image_size, scale=(0.7, 1.0), ratio=(0.9, 1.1), antialias=True)]
    else:
        steps = [v2.Resize((image_size, image_size), antialias=True)]
    return v2.Compose([*to_uint8, *steps, *normalize])


class MultiView:
    """Apply several transforms to the same image and return every result, in order.

    The first transform gives the view the model trains on; the others are the extra augmented views a
    component asked for (DiVA's self-supervised term compares two random views of each image).
    """

    def __init__(self, transforms: list[Callable[[Any], Any]]):
        if not transforms:
            raise ValueError("MultiView needs at least one transform")
        self.transforms = list(transforms)

    def __call__(self, image: Any) -> tuple[Any, ...]:
        """Every view of ``image``, main view first."""
        return tuple(transform(image) for transform in self.transforms)

    def __repr__(self) -> str:
        return f"MultiView({len(self.transforms)} views)"


def build_train_views(
    *, augment: str, image_size: int, views: int = 1, view_augment: str | None = None
) -> Callable[[Any], Any]:
    """The training transform, with ``views - 1`` extra independently augmented views on request.

    Args:
        augment: Augmentation of the main view (see :func:`build_transform`).
        image_size: Output side length of every view.
        views: Total number of views per image; ``1`` returns the plain transform (a tensor), more
            returns a :class:`MultiView` (a tuple of tensors).
        view_augment: Augmentation of the extra views; defaults to ``augment``, or ``"dml"`` when
            ``augment`` is ``"none"`` (an un-augmented second view would equal the first).
    """
    if views < 1:
        raise ValueError(f"views must be at least 1, got {views}")
    main = build_transform("train", augment=augment, image_size=image_size)
    if views == 1:
        return main
    extra = view_augment or (augment if augment != "none" else "dml")
    return MultiView([main] + [build_transform("train", augment=extra, image_size=image_size)
                               for _ in range(views - 1)])
