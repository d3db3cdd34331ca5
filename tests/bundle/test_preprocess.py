"""bundle.json's preprocessing rebuilds the run's test transform exactly; helpers with known answers."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from dmlplug.bundle.errors import BundleError
from dmlplug.bundle.preprocess import build_preprocess, describe_transform, preprocess_batch
from dmlplug.bundle.verify import pick_images
from dmlplug.data.transforms import build_transform


def _classic(resize, crop):
    """The same test transforms in torchvision's classic API (PIL resize, then ToTensor)."""
    from torchvision import transforms as T

    from dmlplug.data.transforms import IMAGENET_MEAN, IMAGENET_STD

    steps = [T.Resize(resize if isinstance(resize, int) else tuple(resize))] + ([T.CenterCrop(crop)] if crop else [])
    return T.Compose([*steps, T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


CASES = [("dml", 73, [64, 64]), ("light", [64, 64], None)]


@pytest.mark.parametrize("api", ["dmlplug", "classic"])
@pytest.mark.parametrize(("augment", "resize", "crop"), CASES)
def test_described_transform_rebuilds_the_same_tensors(api, augment, resize, crop):
    transform = (build_transform("test", augment=augment, image_size=64) if api == "dmlplug"
                 else _classic(resize, crop))
    spec = describe_transform(transform)
    assert spec["resize"] == resize and spec["crop"] == crop and spec["input_size"] == [3, 64, 64]
    ops = [s["op"] for s in spec["steps"]]
    assert ops.index("resize") < ops.index("normalize") and ops[-1] in ("normalize", "to_pure_tensor")
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (90, 120, 3), dtype=np.uint8))
    rebuilt = build_preprocess(json.loads(json.dumps(spec)))(image)  # through JSON, as bundle.json stores it
    assert type(rebuilt) is torch.Tensor and torch.equal(rebuilt, transform(image))


def test_an_indescribable_transform_is_refused():
    from torchvision import transforms as T

    with pytest.raises(BundleError, match="cannot describe"):
        describe_transform(T.Compose([T.Grayscale(), T.ToTensor()]))


def test_pick_images_takes_whole_classes_up_to_the_count():
    labels = np.array([0, 1, 0, 2, 1, 2, 2, 3])
    picked = pick_images(labels, 5)
    assert len(picked) == 5 and list(picked) == sorted(picked)
    counts = np.bincount(labels[picked], minlength=4)
    full = np.bincount(labels, minlength=4)
    # All but at most one class (the last one taken) are complete.
    assert sum(0 < c < f for c, f in zip(counts, full, strict=True)) <= 1
    assert len(pick_images(labels, 100)) == len(labels)


_NORMALIZE = {"op": "normalize", "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.3, 0.4]}


@pytest.mark.parametrize("steps", [
    [{"op": "to_image"}, {"op": "resize", "size": [16, 16], "interpolation": "bilinear", "antialias": True},
     {"op": "to_float"}, _NORMALIZE, {"op": "to_pure_tensor"}],
    [{"op": "resize", "size": 20, "interpolation": "bicubic", "antialias": True},
     {"op": "center_crop", "size": [16, 16]}, {"op": "to_tensor"}, _NORMALIZE],
], ids=["transforms.v2", "classic"])
def test_a_batch_is_preprocessed_exactly_as_image_by_image(steps):
    transform = build_preprocess({"steps": steps})
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in
              [(16, 16), (40, 30), (16, 16), (23, 57), (40, 30)]]  # sizes repeat and differ, in mixed order
    expected = torch.stack([transform(image) for image in images]).numpy()
    assert np.array_equal(preprocess_batch(transform, images), expected)


def _v2_reference(resize, crop, mean, std):
    """The evaluation view as torchvision's own ``transforms.v2`` steps: the oracle of the lean pipeline."""
    from torchvision.transforms import v2

    geometry = [v2.Resize(resize, antialias=True)] + ([v2.CenterCrop(crop)] if crop else [])
    return v2.Compose([v2.ToImage(), *geometry, v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std),
                       v2.ToPureTensor()])


@pytest.mark.parametrize(("resize", "crop"), [([16, 16], None), (20, [16, 16]), ([18, 14], [12, 12])])
def test_a_bundle_spec_of_the_evaluation_view_runs_lean_and_gives_torchvisions_tensors(resize, crop):
    from dmlplug.data.image_ops import TensorPipeline

    reference = _v2_reference(resize, crop, _NORMALIZE["mean"], _NORMALIZE["std"])
    spec = json.loads(json.dumps(describe_transform(reference)))
    lean = build_preprocess(spec)
    assert isinstance(lean, TensorPipeline) and describe_transform(lean)["steps"] == spec["steps"]
    rng = np.random.default_rng(1)
    images = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in
              [(16, 16), (41, 30), (16, 16), (23, 57)]]
    images.append(Image.fromarray(rng.integers(0, 256, (30, 30), dtype=np.uint8)))  # grey: broadcast to 3
    expected = torch.stack([reference(image) for image in images])
    batch = preprocess_batch(lean, images)  # the 16-px RGB images skip torch; the others go through its resize
    assert batch.dtype == np.float32 and np.array_equal(batch, expected.numpy())
    assert torch.equal(lean(images[1]), expected[1])


def test_the_numpy_normalisation_equals_the_torch_one_for_every_pixel_value():
    from dmlplug.data.image_ops import TensorPipeline

    pipeline = TensorPipeline([], mean=_NORMALIZE["mean"], std=_NORMALIZE["std"])
    every = np.tile(np.arange(256, dtype=np.uint8), (2, 3, 16, 1))  # each value in each channel: 2×3×16×256
    assert np.array_equal(pipeline.normalise_array(every), pipeline.normalise(torch.from_numpy(every)).numpy())
    grey = every[:, :1]
    assert np.array_equal(pipeline.normalise_array(grey), pipeline.normalise(torch.from_numpy(grey)).numpy())


def test_a_spec_the_lean_pipeline_cannot_compute_keeps_torchvisions_transforms():
    from torchvision.transforms import v2

    steps = [{"op": "to_image"}, {"op": "resize", "size": [16, 16], "interpolation": "bicubic", "antialias": True},
             {"op": "to_float"}, _NORMALIZE, {"op": "to_pure_tensor"}]
    assert isinstance(build_preprocess({"steps": steps}), v2.Compose)
