"""The tensor fast path of file sources: ``FileImageSource.load_tensor`` against the PIL path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dmlplug.data.image_files import FileImageSource, decode_image, decode_image_tensor
from dmlplug.data.transforms import build_transform
from dmlplug.engine.data import TransformedSource
from dmlplug.errors import DataError


def _photo(size=(333, 250), seed=0):
    """A photo-like RGB PIL image: smooth colour fields plus grain (so JPEG has real work to do)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, size=(12, 16, 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize(size, Image.BICUBIC), dtype=np.int16)
    grain = rng.integers(-12, 13, size=smooth.shape, dtype=np.int16)
    return Image.fromarray(np.clip(smooth + grain, 0, 255).astype(np.uint8))


def _pil_chw(path):
    """The PIL path's pixels as a ``3×H×W`` array, the layout of the tensor path."""
    return np.asarray(decode_image(str(path))).transpose(2, 0, 1)


def _assert_same_pixels(path):
    tensor = decode_image_tensor(str(path))
    assert isinstance(tensor, torch.Tensor) and tensor.dtype == torch.uint8
    expected = _pil_chw(path)
    assert tuple(tensor.shape) == expected.shape and expected.shape[0] == 3
    # Measured: Pillow and torchvision both decode with libjpeg-turbo's default (islow DCT, fancy
    # upsampling) and libpng, and agree exactly; no rounding tolerance is needed.
    assert np.array_equal(tensor.numpy(), expected)


@pytest.mark.parametrize("options", [{"quality": 90}, {"quality": 75, "subsampling": 0},
                                     {"quality": 85, "progressive": True}], ids=["420", "444", "progressive"])
def test_jpeg_tensor_equals_pil_pixel_for_pixel(tmp_path, options):
    path = tmp_path / "photo.jpg"
    _photo().save(path, "JPEG", **options)
    _assert_same_pixels(path)


@pytest.mark.parametrize("mode,fmt", [("L", "JPEG"), ("CMYK", "JPEG"), ("L", "PNG"), ("LA", "PNG"),
                                      ("RGBA", "PNG"), ("P", "PNG"), ("RGB", "PNG")])
def test_other_colour_modes_become_the_same_rgb(tmp_path, mode, fmt):
    from PIL import Image

    image = _photo(seed=1).convert(mode)
    if mode in ("LA", "RGBA"):  # a real alpha channel, dropped without compositing on both paths
        alpha = np.tile(np.linspace(0, 255, image.width, dtype=np.uint8), (image.height, 1))
        image.putalpha(Image.fromarray(alpha))
    path = tmp_path / f"image.{fmt.lower()}"
    image.save(path, fmt)
    _assert_same_pixels(path)
    if mode in ("L", "LA"):  # greyscale: three equal channels
        tensor = decode_image_tensor(str(path))
        assert torch.equal(tensor[0], tensor[1]) and torch.equal(tensor[1], tensor[2])


def test_jpeg_and_png_are_decoded_by_torchvision_not_pillow(tmp_path, monkeypatch):
    from dmlplug.data import image_files

    for fmt in ("JPEG", "PNG"):
        _photo(size=(40, 30)).save(tmp_path / f"x.{fmt.lower()}", fmt)
    expected = {fmt: _pil_chw(tmp_path / f"x.{fmt.lower()}") for fmt in ("JPEG", "PNG")}

    def no_pillow(path):
        raise AssertionError(f"Pillow used for {path}")

    monkeypatch.setattr(image_files, "decode_image", no_pillow)
    for fmt in ("JPEG", "PNG"):
        assert np.array_equal(decode_image_tensor(str(tmp_path / f"x.{fmt.lower()}")).numpy(), expected[fmt])


@pytest.mark.parametrize("fmt,suffix", [("BMP", "bmp"), ("TIFF", "tif"), ("GIF", "gif")])
def test_formats_torchvision_does_not_take_go_through_pillow(tmp_path, fmt, suffix):
    path = tmp_path / f"image.{suffix}"
    _photo(size=(40, 30), seed=2).save(path, fmt)
    _assert_same_pixels(path)


def test_sixteen_bit_png_falls_back_to_the_pil_conversion(tmp_path):
    from PIL import Image

    values = np.arange(30 * 40, dtype=np.uint16).reshape(30, 40) * 50
    Image.fromarray(values).save(tmp_path / "deep.png")
    _assert_same_pixels(tmp_path / "deep.png")


def test_exif_orientation_is_ignored_on_both_paths(tmp_path):
    image = _photo(size=(60, 40), seed=3)
    exif = image.getexif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display"
    image.save(tmp_path / "rotated.jpg", "JPEG", exif=exif.tobytes())
    assert tuple(decode_image_tensor(str(tmp_path / "rotated.jpg")).shape) == (3, 40, 60)
    _assert_same_pixels(tmp_path / "rotated.jpg")


def test_corrupt_and_truncated_files_give_the_pil_paths_error(trees, tmp_path):
    paths = [trees.write_image(tmp_path / f"{i}.jpg", seed=i, size=(64, 48)) for i in range(3)]
    source = FileImageSource(paths, [0, 0, 0], ["a"], name="toy/train")
    trees.corrupt(paths[1])
    trees.truncate(paths[2])
    for index in (1, 2):
        with pytest.raises(DataError) as from_pil:
            source.load_image(index)
        with pytest.raises(DataError) as from_tensor:
            source.load_tensor(index)
        assert str(from_tensor.value) == str(from_pil.value)
        assert f"cannot decode image {paths[index]}" in str(from_tensor.value)


def test_skip_policy_applies_to_the_tensor_path(trees, tmp_path, caplog):
    paths = [trees.write_image(tmp_path / f"{i}.jpg", seed=i) for i in range(3)]
    source = FileImageSource(paths, [0, 0, 0], ["a"], decode_errors="skip")
    trees.corrupt(paths[1])
    served = source.load_tensor(1)
    assert np.array_equal(served.numpy(), _pil_chw(paths[2]))
    assert source.skipped == 1


def test_transformed_source_uses_tensors_and_matches_the_pil_path(tmp_path):
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"{i}.jpg")
        _photo(size=(90, 70), seed=i).save(paths[-1], "JPEG")
    source = FileImageSource(paths, [0, 1, 1], ["a", "b"])
    calls = []
    transform = build_transform("test", augment="dml", image_size=32)

    def recording(image):
        calls.append(type(image))
        return transform(image)

    fast = TransformedSource(source, recording)
    slow = TransformedSource(source, recording, tensors=False)
    for index in range(3):
        image, label, item = fast[index]
        reference, _, _ = slow[index]
        assert (label, item) == (int(source.labels[index]), index)
        assert torch.equal(image, reference)
    assert calls[0] is torch.Tensor and calls[1] is not torch.Tensor


def test_a_subset_keeps_the_tensor_path_of_its_parent_and_a_source_without_one_does_not_gain_it(tmp_path):
    from dmlplug.data.base import ArraySource, ImageSource

    paths = []
    for i in range(3):
        paths.append(tmp_path / f"{i}.jpg")
        _photo(size=(40, 30), seed=i).save(paths[-1], "JPEG")
    subset = FileImageSource(paths, [0, 1, 1], ["a", "b"]).subset(np.array([2, 0]))
    assert torch.equal(subset.load_tensor(0), decode_image_tensor(str(paths[2])))
    in_memory = ArraySource(np.arange(32, dtype=np.uint8).reshape(2, 4, 4), np.array([0, 1]), ["a", "b"])
    assert np.array_equal(in_memory.subset(np.array([1])).load_tensor(0).numpy(),
                          np.asarray(in_memory.load_image(1)).transpose(2, 0, 1))

    class PilOnly(ImageSource):
        labels, class_names = np.array([0, 1]), ["a", "b"]

    assert not hasattr(PilOnly().subset(np.array([1])), "load_tensor")  # TransformedSource then uses load_image
