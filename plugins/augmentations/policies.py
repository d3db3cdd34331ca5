"""The policy object the built-in augmentations return: lean tensor steps between the conversions."""

from __future__ import annotations

from typing import Any

from dmlplug.data.image_ops import TensorPipeline


class Policy:
    """A training augmentation: ``steps`` on a uint8 tensor image, then conversion to float and normalisation.

    The steps are :mod:`dmlplug.data.image_ops` steps: each computes what its torchvision v2 namesake computes,
    from the same random draws, in a fraction of its time (tests/builtins/augmentations compares every policy
    with the former v2 pipeline, bit for bit). Random draws come from torch's global generator, which the
    engine seeds per sample (docs/resume.md).

    Attributes:
        transform: The whole pipeline, a :class:`~dmlplug.data.image_ops.TensorPipeline`.
        eval_crop: Whether evaluation resizes the shorter side and centre-crops (``True``) or resizes to a
            square (``False``), read by the engine when it builds the evaluation transform.
        view_augment: The registered augmentation of the extra views a component asks for (``None``: this one).
        random_sources: the steps draw from torch's default generator only, so the engine seeds only that one
            per sample (python's and numpy's would cost ~0.9 ms per batch of 64 for nothing).
        tensor_input: the steps take uint8 tensors, so the engine skips the PIL round trip where it can.
    """

    random_sources = frozenset({"torch"})
    tensor_input = True

    def __init__(self, steps: list[Any], *, eval_crop: bool = True, view_augment: str | None = None):
        self.transform = TensorPipeline(steps)
        self.eval_crop = eval_crop
        self.view_augment = view_augment

    def __call__(self, image: Any) -> Any:
        """The augmented, normalised ``3×S×S`` float tensor of ``image`` (PIL image or ``C×H×W`` uint8 tensor)."""
        return self.transform(image)

    def __repr__(self) -> str:
        extra = f", view_augment={self.view_augment!r}" if self.view_augment else ""
        return f"Policy({self.transform!r}, eval_crop={self.eval_crop}{extra})"
