"""Lean image pipelines: the built-in augmentations and the evaluation view in as few tensor operations as they need.

A :class:`TensorPipeline` turns a PIL image or a ``C×H×W`` uint8 tensor into a normalised ``3×S×S`` float
tensor through geometry steps on the uint8 tensor (:class:`RandomResizedCrop`, :class:`HorizontalFlip`,
:class:`Resize`, :class:`CenterCrop`), then one conversion to float and normalisation. Each step computes
exactly what its torchvision ``transforms.v2`` namesake computes and draws the same random numbers from torch's
default generator (which :class:`dmlplug.engine.seeding.SeededDataset` seeds per sample), so a pipeline gives
the same tensor, bit for bit, as the ``v2.Compose`` of :attr:`TensorPipeline.transforms` (the tests compare the
two; ``bundle.json`` describes that ``Compose``).

Why not the ``v2.Compose`` itself: each v2 transform pays for its generality on every image (unwrapping and
re-wrapping inputs, dispatch by input type, ``tv_tensors`` subclasses). On a 32-px glyph tensor the five
transforms of the ``light`` policy cost ~180-195 µs per image, of which ~20 µs is the resize itself; this
pipeline costs ~60 µs (drawing the crop ~12, crop + resize ~27, conversion + normalisation ~9; ``timeit`` on
the shared 2-core VM; ``benchmarks/train_speed.py`` measures what it changes per training step). Torch is
imported at module level: import this module where a transform is built, not at import time of a plugin.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.nn.functional import interpolate
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from dmlplug.data.normalization import IMAGENET_MEAN, IMAGENET_STD

# torchvision resizes uint8 images natively (no float round trip) on these CPUs only, and elsewhere converts to
# float, resizes, rounds and converts back: :func:`resize` takes the same decision to give the same pixels.
_NATIVE_UINT8 = (torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
                 or platform.machine() in ("aarch64", "arm64"))


def _pair(size: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(size, int):
        return size, size
    if len(size) == 1:
        return int(size[0]), int(size[0])
    return int(size[0]), int(size[1])


def to_uint8_tensor(image: Any) -> torch.Tensor:
    """``image`` as a plain ``C×H×W`` tensor: a tensor as it is, a PIL image (or ``H×W×C`` array) converted.

    What ``v2.ToImage`` does, without its ``tv_tensors.Image`` subclass (every later operation on the subclass
    goes through ``__torch_function__``).
    """
    if isinstance(image, torch.Tensor):
        return image.as_subclass(torch.Tensor) if type(image) is not torch.Tensor else image
    return F.to_image(image).as_subclass(torch.Tensor)


def resize(image: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """``image`` (``C×H×W``) resized to ``size`` (h, w): bilinear, antialiased, as ``v2.functional.resize``."""
    if tuple(image.shape[-2:]) == size:
        return image  # torchvision returns the input unchanged too
    if image.dtype == torch.uint8 and not (_NATIVE_UINT8 and image.device.type == "cpu"):
        return F.resize_image(image, list(size), antialias=True)  # torchvision's float round trip
    return interpolate(image[None], size=size, mode="bilinear", antialias=True, align_corners=False)[0]


class RandomResizedCrop:
    """A crop of random area and aspect ratio, resized to ``size``: ``v2.RandomResizedCrop(size, scale, ratio)``.

    The crop is drawn as torchvision draws it (up to ten tries of a uniform area fraction in ``scale`` and a
    log-uniform aspect ratio in ``ratio``, then a uniform position; else the central crop of the closest
    ratio), with the same calls on torch's default generator, so the same seed gives the same crop.
    """

    def __init__(self, size: int | Sequence[int], scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)):
        self.size = _pair(size)
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        log_ratio = torch.log(torch.tensor(self.ratio))  # float32, as torchvision computes the bounds
        self._log_ratio = (float(log_ratio[0]), float(log_ratio[1]))

    def box(self, height: int, width: int) -> tuple[int, int, int, int]:
        """Draw the crop of a ``height×width`` image: ``(top, left, crop height, crop width)``."""
        area = height * width
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(*self.scale).item()
            aspect = torch.exp(torch.empty(1).uniform_(*self._log_ratio)).item()
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                top = int(torch.randint(0, height - h + 1, size=(1,)).item())
                left = int(torch.randint(0, width - w + 1, size=(1,)).item())
                return top, left, h, w
        in_ratio = width / height
        if in_ratio < min(self.ratio):
            w, h = width, int(round(width / min(self.ratio)))
        elif in_ratio > max(self.ratio):
            w, h = int(round(height * max(self.ratio))), height
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        """A random crop of ``image`` (``C×H×W``), resized to ``size``."""
        top, left, h, w = self.box(*image.shape[-2:])
        return resize(image[..., top:top + h, left:left + w], self.size)  # the crop is a view: no copy

    def reference(self) -> Any:
        """The torchvision transform computing the same."""
        return v2.RandomResizedCrop(self.size, scale=self.scale, ratio=self.ratio, antialias=True)

    def __repr__(self) -> str:
        return f"RandomResizedCrop(size={self.size}, scale={self.scale}, ratio={self.ratio})"


class HorizontalFlip:
    """Mirror left-right with probability 1/2: ``v2.RandomHorizontalFlip()`` (one ``torch.rand(1)`` draw)."""

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        """``image`` mirrored, or as it is."""
        return image.flip(-1) if torch.rand(1).item() < 0.5 else image

    def reference(self) -> Any:
        """The torchvision transform computing the same."""
        return v2.RandomHorizontalFlip()

    def __repr__(self) -> str:
        return "HorizontalFlip(p=0.5)"


class Resize:
    """``v2.Resize(size)``: an int resizes the shorter side (aspect kept), ``(h, w)`` both; bilinear, antialiased."""

    def __init__(self, size: int | Sequence[int]):
        self.size: int | tuple[int, int] = size if isinstance(size, int) else _pair(size)

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """The ``(h, w)`` a ``height×width`` image is resized to (the longer side truncated, as torchvision does)."""
        if not isinstance(self.size, int):
            return self.size
        if width <= height:
            return int(self.size * height / width), self.size
        return self.size, int(self.size * width / height)

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        """``image`` resized."""
        return resize(image, self.output_size(*image.shape[-2:]))

    def reference(self) -> Any:
        """The torchvision transform computing the same."""
        return v2.Resize(self.size if isinstance(self.size, int) else list(self.size), antialias=True)

    def __repr__(self) -> str:
        return f"Resize({self.size})"


class CenterCrop:
    """``v2.CenterCrop(size)``: the central ``size`` window, as a view (zero-padded by torchvision if larger)."""

    def __init__(self, size: int | Sequence[int]):
        self.size = _pair(size)

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        """The centre of ``image``."""
        (height, width), (h, w) = image.shape[-2:], self.size
        if h > height or w > width:
            return F.center_crop(image, list(self.size))  # torchvision pads; never the case after a Resize
        top, left = int(round((height - h) / 2.0)), int(round((width - w) / 2.0))
        return image[..., top:top + h, left:left + w]

    def reference(self) -> Any:
        """The torchvision transform computing the same."""
        return v2.CenterCrop(list(self.size))

    def __repr__(self) -> str:
        return f"CenterCrop({self.size})"


class TensorPipeline:
    """Image -> normalised float tensor: to a uint8 tensor, ``steps``, then float conversion and normalisation.

    The conversion is one chain of in-place operations on the first float copy, in torchvision's order and
    arithmetic (``x * (1/255)``, minus the mean, divided by the std), so the result equals the
    ``v2.Compose`` of :attr:`transforms` bit for bit. A float tensor input is taken as already scaled to 0–1,
    as ``v2.ToDtype(scale=True)`` takes it.

    Args:
        steps: Geometry steps on the ``C×H×W`` tensor (those of this module: objects with ``__call__`` and a
            ``reference()`` torchvision transform).
        mean: Per-channel mean of the normalisation (default ImageNet's).
        std: Per-channel standard deviation (default ImageNet's).
    """

    #: It takes ``C×H×W`` uint8 tensors as well as PIL images (:class:`dmlplug.protocols.HasTensorInput`), so a
    #: policy that is a pipeline itself gets the tensors of sources that have ``load_tensor``.
    tensor_input = True

    def __init__(self, steps: Sequence[Any], mean: Sequence[float] = IMAGENET_MEAN,
                 std: Sequence[float] = IMAGENET_STD):
        self.steps = list(steps)
        self.mean, self.std = tuple(mean), tuple(std)
        self._mean = torch.tensor(self.mean, dtype=torch.float32).view(-1, 1, 1)
        self._std = torch.tensor(self.std, dtype=torch.float32).view(-1, 1, 1)
        self._mean_array = self._mean.numpy()
        self._std_array = self._std.numpy()

    def __call__(self, image: Any) -> torch.Tensor:
        """The normalised float tensor of ``image`` (PIL image or ``C×H×W`` uint8 tensor)."""
        return self.normalise(self.geometry(image))

    def geometry(self, image: Any) -> torch.Tensor:
        """``image`` as a ``C×H×W`` tensor after the geometry steps, still uint8 (the first half of a call)."""
        x = to_uint8_tensor(image)
        for step in self.steps:
            x = step(x)
        return x

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """The float conversion and normalisation of :meth:`geometry`'s output or of a ``B×C×H×W`` stack of them.

        Elementwise: a stack gives the same numbers as each image alone.
        """
        if x.dtype == torch.uint8:
            # sub (not sub_): a 1-channel image broadcasts to the 3 channels of the statistics, as in torchvision
            return x.to(torch.float32).mul_(1.0 / 255).sub(self._mean).div_(self._std)
        return x.to(torch.float32).sub(self._mean).div_(self._std)  # a float input may be the caller's tensor

    def normalise_array(self, x: np.ndarray) -> np.ndarray:
        """:meth:`normalise` in numpy: the same float32 operations in the same order, so the same numbers.

        For callers that hold arrays (tests/bundle/test_preprocess.py compares the two); a ``B×C×H×W`` uint8 stack
        gives ``B×3×H×W``. Why a numpy twin: every torch operation releases the GIL, and a thread that gives it up
        while another holds it (a server's event loop) waits up to the switch interval to get it back; these four
        numpy operations hand it over less often.
        """
        out = x.astype(np.float32)
        if x.dtype == np.uint8:
            out *= np.float32(1.0 / 255)
        if out.shape[-3] == len(self.mean):
            out -= self._mean_array
        else:  # a 1-channel image broadcasts to the channels of the statistics, as in :meth:`normalise`
            out = out - self._mean_array
        out /= self._std_array
        return out

    def keeps(self, height: int, width: int) -> bool:
        """Whether every geometry step leaves a ``height×width`` image as it is (resized to its size, cropped whole)."""
        for step in self.steps:
            if isinstance(step, Resize) and step.output_size(height, width) == (height, width):
                continue
            if isinstance(step, CenterCrop) and step.size == (height, width):
                continue
            return False
        return True

    @property
    def transforms(self) -> list[Any]:
        """The torchvision v2 steps this pipeline equals: what ``bundle.json`` describes and rebuilds."""
        return [v2.ToImage(), *(step.reference() for step in self.steps), v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(list(self.mean), list(self.std)), v2.ToPureTensor()]

    def reference(self) -> Any:
        """The ``v2.Compose`` computing the same (slower: the tests' oracle)."""
        return v2.Compose(self.transforms)

    def __repr__(self) -> str:
        steps = ", ".join(repr(step) for step in self.steps)
        return f"TensorPipeline([{steps}], mean={self.mean}, std={self.std})"
