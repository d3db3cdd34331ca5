"""Protocol transforms, extra views, and file sources behind the engine's DataLoader."""

from __future__ import annotations

import numpy as np
import pytest

from dmlplug.data.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    MultiView,
    build_train_views,
    build_transform,
)


def _photo(width=500, height=375, colour=(200, 40, 90)):
    from PIL import Image

    return Image.new("RGB", (width, height), colour)


def _gradient(width=500, height=375):
    from PIL import Image

    x = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None, None]
    return Image.fromarray(np.broadcast_to(np.concatenate([x + 0 * y, y + 0 * x, (x + y) / 2], 2),
                                           (height, width, 3)).astype(np.uint8))


def test_protocol_shapes_and_imagenet_normalisation():
    colour = (200, 40, 90)
    expected = [(c / 255 - m) / s for c, m, s in zip(colour, IMAGENET_MEAN, IMAGENET_STD, strict=True)]
    for mode in ("train", "test"):
        out = build_transform(mode, augment="dml", image_size=224)(_photo(colour=colour))
        assert tuple(out.shape) == (3, 224, 224)
        assert np.allclose(out.mean(dim=(1, 2)).numpy(), expected, atol=1e-5)


def test_test_transform_resizes_the_shorter_side_then_centre_crops():
    from torchvision.transforms import functional as F

    image = _gradient()
    out = build_transform("test", augment="dml", image_size=224)(image)
    # shorter side 375 -> 256 keeps the aspect ratio: 500 -> 341; crop the centre 224
    reference = F.center_crop(F.resize(image, 256), 224)
    expected = (np.asarray(reference, dtype=np.float32) / 255 - IMAGENET_MEAN) / IMAGENET_STD
    assert np.allclose(out.permute(1, 2, 0).numpy(), expected, atol=1e-5)
    assert build_transform("test", augment="dml", image_size=112)(image).shape[-1] == 112


def test_train_transform_is_random_and_test_transform_is_not():
    import torch

    torch.manual_seed(0)
    image = _gradient()
    train = build_transform("train", augment="dml", image_size=64)
    test = build_transform("test", augment="dml", image_size=64)
    assert not torch.equal(train(image), train(image))
    assert torch.equal(test(image), test(image))


def test_extra_views_are_independent_augmentations_of_the_same_image():
    import torch

    torch.manual_seed(0)
    single = build_train_views(augment="dml", image_size=32, views=1)
    assert not isinstance(single, MultiView) and tuple(single(_gradient()).shape) == (3, 32, 32)
    two = build_train_views(augment="dml", image_size=32, views=2)
    first, second = two(_gradient())
    assert first.shape == second.shape == (3, 32, 32) and not torch.equal(first, second)
    # an un-augmented recipe still gets a differently augmented second view
    plain = build_train_views(augment="none", image_size=32, views=2)
    a, b = plain(_gradient())
    assert torch.equal(a, build_transform("test", augment="none", image_size=32)(_gradient()))
    assert not torch.equal(a, b)
    with pytest.raises(ValueError, match="views"):
        build_train_views(augment="dml", image_size=32, views=0)


def test_extra_views_are_built_by_the_registry_of_the_context_given():
    # A run's own host (here one with a policy the process-wide host lacks) builds every view, not the global one.
    from dmlplug import BuildContext, hookimpl
    from dmlplug.plugins import PluginHost

    built = []

    class Mark:
        view_augment = "second"

        def __init__(self, name):
            self.name = name

        def __call__(self, image):
            return self.name

    class OwnPolicies:
        @hookimpl
        def register_augmentations(self, register):
            for name in ("first", "second"):
                register(name, lambda params, ctx, name=name: built.append(name) or Mark(name))

    host = PluginHost().load(builtins=False, entry_points=False)
    host.add_plugin(OwnPolicies(), "own")
    views = build_train_views(augment="first", image_size=8, views=3, ctx=BuildContext(host=host))
    assert views(None) == ("first", "second", "second") and built == ["first", "second", "second"]


def test_dataloader_over_files_with_a_worker_and_two_views(trees, tmp_path):
    import torch

    from dmlplug.data.image_files import FileImageSource
    from dmlplug.engine.data import TransformedSource

    paths = [trees.write_image(tmp_path / f"{i}.jpg", seed=i, size=(40, 30)) for i in range(6)]
    source = FileImageSource(paths, [0, 0, 1, 1, 2, 2], ["a", "b", "c"])
    dataset = TransformedSource(source, build_train_views(augment="dml", image_size=16, views=2))
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=1, persistent_workers=True)
    batches = list(loader)
    (views, labels, indices), last = batches[0], batches[1]
    # The views of a sample travel stacked (B×N×C×H×W) so the train loop handles one tensor.
    assert views.shape == (4, 2, 3, 16, 16)
    assert labels.tolist() == [0, 0, 1, 1] and indices.tolist() == [0, 1, 2, 3]
    assert last[2].tolist() == [4, 5]


def test_a_decode_failure_inside_a_worker_reaches_the_main_process_as_a_data_error(trees, tmp_path):
    import torch

    from dmlplug.data.image_files import FileImageSource
    from dmlplug.engine.data import TransformedSource
    from dmlplug.errors import DataError

    paths = [trees.write_image(tmp_path / f"{i}.jpg", seed=i) for i in range(4)]
    trees.corrupt(paths[2])
    source = FileImageSource(paths, [0, 0, 1, 1], ["a", "b"])
    dataset = TransformedSource(source, build_transform("test", augment="dml", image_size=8))
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=1)
    with pytest.raises(DataError, match=r"cannot decode image .*2\.jpg"):
        list(loader)
    source.decode_errors = "skip"  # the policy travels to the worker with the source
    images, labels, _ = next(iter(torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=1)))
    assert torch.equal(images[2], images[3]) and labels.tolist() == [0, 0, 1, 1]


@pytest.mark.parametrize("mode", ["train", "test"])
def test_pil_images_and_uint8_tensors_give_the_same_result(mode):
    # The transforms run on uint8 tensors (measured faster than PIL's): a PIL image and the same pixels as a
    # C×H×W tensor (what torchvision.io.decode_jpeg returns) are the same input under the same seed.
    import torch
    from torchvision.transforms.functional import pil_to_tensor

    image = _gradient()
    transform = build_transform(mode, augment="dml", image_size=64)
    torch.manual_seed(3)
    from_pil = transform(image)
    torch.manual_seed(3)
    from_tensor = transform(pil_to_tensor(image))
    assert type(from_pil) is torch.Tensor and from_pil.dtype == torch.float32
    assert torch.equal(from_pil, from_tensor)


def test_only_policies_that_declare_tensor_input_are_given_tensors():
    from dmlplug.data.transforms import MultiView, accepts_tensors, normalized_pipeline

    class PilOnly:
        def __call__(self, image):
            return image

    lean = build_transform("train", augment="dml", image_size=8)
    from dmlplug.data.image_ops import TensorPipeline

    assert accepts_tensors(lean) and accepts_tensors(normalized_pipeline([])) and accepts_tensors(TensorPipeline([]))
    assert not accepts_tensors(PilOnly())
    assert accepts_tensors(MultiView([lean, lean])) and not accepts_tensors(MultiView([lean, PilOnly()]))
