"""The lean tensor pipelines (dmlplug.data.image_ops) against the torchvision v2 pipelines they replace.

tests/builtins/augmentations compares the registered policies and the engine's evaluation view with the former
v2 ``Compose`` (augment_oracle.py) on ordinary photos; here, the inputs that take the other branches: crops
torchvision falls back to the centre for, padded centre crops, greyscale and float inputs, and the in-memory
source's tensor path.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision.transforms import v2

from dmlplug.data.base import ArraySource
from dmlplug.data.image_ops import CenterCrop, HorizontalFlip, RandomResizedCrop, Resize, TensorPipeline
from dmlplug.data.transforms import IMAGENET_MEAN, IMAGENET_STD, build_test_transform


def _tensor(channels, height, width, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).integers(0, 256, (channels, height, width), dtype=np.uint8))


def _v2(steps):
    """The pipeline as torchvision v2 alone would compute it (written out, not taken from the pipeline)."""
    return v2.Compose([v2.ToImage(), *steps, v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(IMAGENET_MEAN, IMAGENET_STD), v2.ToPureTensor()])


def _same_under_seeds(lean, reference, image, seeds=range(12)):
    for seed in seeds:
        torch.manual_seed(seed)
        out = lean(image)
        torch.manual_seed(seed)
        assert torch.equal(out, reference(image)), seed


@pytest.mark.parametrize("shape", [(2, 300), (300, 2), (1, 1), (5, 400)])
def test_random_resized_crop_falls_back_to_the_centre_as_torchvision_does(shape):
    # Images this thin make all ten tries fail most of the time: the crop falls back to the central one.
    lean = TensorPipeline([RandomResizedCrop(16), HorizontalFlip()])
    reference = _v2([v2.RandomResizedCrop(16, antialias=True), v2.RandomHorizontalFlip()])
    _same_under_seeds(lean, reference, _tensor(3, *shape))


@pytest.mark.parametrize(("resize_size", "size"), [(20, 32), (None, 9)])
def test_evaluation_view_pads_a_centre_crop_larger_than_the_resized_image(resize_size, size):
    # [data] resize_size below image_size: torchvision pads the crop with zeros, and so does the lean view
    lean = build_test_transform(image_size=size, resize_size=resize_size)
    reference = _v2([v2.Resize(resize_size or round(size * 256 / 224), antialias=True), v2.CenterCrop(size)])
    for shape in ((45, 30), (30, 45), (7, 7)):
        image = _tensor(3, *shape)
        assert torch.equal(lean(image), reference(image)), shape


def test_greyscale_and_float_tensors_are_taken_as_torchvision_takes_them():
    lean = TensorPipeline([Resize(12), CenterCrop(10)])
    reference = _v2([v2.Resize(12, antialias=True), v2.CenterCrop(10)])
    grey = _tensor(1, 40, 30)
    assert lean(grey).shape == (3, 10, 10) and torch.equal(lean(grey), reference(grey))
    scaled = _tensor(3, 40, 30).float() / 255
    before = scaled.clone()
    assert torch.equal(lean(scaled), reference(scaled)) and torch.equal(scaled, before)  # input left as it was


def test_the_same_seed_gives_the_same_augmentation_and_another_seed_another():
    lean = TensorPipeline([RandomResizedCrop(16), HorizontalFlip()])
    image = _tensor(3, 50, 70)
    outputs = []
    for seed in (4, 4, 5):
        torch.manual_seed(seed)
        outputs.append(lean(image))
    assert torch.equal(outputs[0], outputs[1]) and not torch.equal(outputs[0], outputs[2])


def test_transforms_lists_the_torchvision_steps_the_pipeline_equals():
    lean = TensorPipeline([Resize((8, 6)), RandomResizedCrop(4, scale=(0.5, 1.0), ratio=(0.9, 1.1))])
    kinds = [type(step) for step in lean.transforms]
    assert kinds == [v2.ToImage, v2.Resize, v2.RandomResizedCrop, v2.ToDtype, v2.Normalize, v2.ToPureTensor]
    assert lean.transforms[2].scale == (0.5, 1.0) and lean.transforms[2].ratio == (0.9, 1.1)
    _same_under_seeds(lean, lean.reference(), _tensor(3, 20, 20), seeds=range(3))


@pytest.mark.parametrize("shape", [(5, 9, 7), (5, 9, 7, 3), (5, 9, 7, 4)])
def test_an_in_memory_source_gives_the_pixels_of_its_pil_images_as_a_tensor(shape):
    images = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    source = ArraySource(images, np.arange(5), list("abcde"))
    tensor = source.load_tensor(2)
    assert tensor.dtype == torch.uint8 and tensor.shape == (3, 9, 7)
    assert np.array_equal(tensor.numpy(), np.asarray(source.load_image(2)).transpose(2, 0, 1))
    images[2] = 0  # the tensor is a copy: nothing a transform does reaches the dataset, nor the other way
    assert tensor.max() > 0


def test_an_in_memory_source_whose_subclass_overrides_load_image_keeps_those_pixels():
    from PIL import Image

    class Inverted(ArraySource):
        def load_image(self, index):
            return Image.fromarray(255 - self.images[index]).convert("RGB")

    source = Inverted(np.zeros((2, 4, 4), np.uint8), np.arange(2), ["a", "b"])
    assert int(source.load_tensor(1).min()) == 255


def test_the_engines_loader_feeds_in_memory_tensors_to_the_policy_with_the_result_of_the_pil_path():
    import dmlplug
    from dmlplug.engine.data import TransformedSource
    from dmlplug.engine.seeding import SeededDataset, SeededIndex

    images = np.random.default_rng(0).integers(0, 256, (4, 40, 30), dtype=np.uint8)
    source = ArraySource(images, np.array([0, 0, 1, 1]), ["a", "b"])
    policy = dmlplug.create("augmentation", "dml", image_size=16)
    fast, slow = (SeededDataset(TransformedSource(source, policy, tensors=t), frozenset({"torch"}))
                  for t in (True, False))
    indices = [SeededIndex(i, seed=100 + i) for i in range(4)]
    for (a, _, _), (b, _, _) in zip(fast.__getitems__(indices), slow.__getitems__(indices), strict=True):
        assert torch.equal(a, b)
