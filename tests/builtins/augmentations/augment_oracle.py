"""Today's ``build_transform`` before the augmentation policies became registered components, kept verbatim.

The oracle of tests/builtins/augmentations: the registered ``dml``, ``light`` and ``none`` policies and the
engine's evaluation transform must give exactly the tensors this function gave, for the same seed.
"""

from __future__ import annotations

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def old_build_transform(mode, *, augment, image_size, resize_size=None):
    import torch
    from torchvision.transforms import v2

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


def old_build_train_views(*, augment, image_size, views=1, view_augment=None):
    main = old_build_transform("train", augment=augment, image_size=image_size)
    if views == 1:
        return main
    extra = view_augment or (augment if augment != "none" else "dml")
    transforms = [main] + [old_build_transform("train", augment=extra, image_size=image_size)
                           for _ in range(views - 1)]
    return lambda image: tuple(t(image) for t in transforms)
