"""The policy object the built-in augmentations return: torchvision v2 steps between the engine's conversions."""

from __future__ import annotations

from typing import Any

from dmlplug.data.transforms import normalized_pipeline


class Policy:
    """A training augmentation: ``steps`` on a uint8 tensor image, then conversion to float and normalisation.

    Random draws come from torch's global generator, which the engine seeds per sample (docs/resume.md).

    Attributes:
        transform: The whole ``torchvision.transforms.v2.Compose`` pipeline.
        eval_crop: Whether evaluation resizes the shorter side and centre-crops (``True``) or resizes to a
            square (``False``), read by the engine when it builds the evaluation transform.
        view_augment: The registered augmentation of the extra views a component asks for (``None``: this one).
        random_sources: torchvision's v2 transforms draw from torch's default generator only, so the engine
            seeds only that one per sample (python's and numpy's would cost ~0.9 ms per batch of 64 for nothing).
    """

    random_sources = frozenset({"torch"})

    def __init__(self, steps: list[Any], *, eval_crop: bool = True, view_augment: str | None = None):
        self.transform = normalized_pipeline(steps)
        self.eval_crop = eval_crop
        self.view_augment = view_augment

    def __call__(self, image: Any) -> Any:
        """The augmented, normalised ``3×S×S`` float tensor of ``image``."""
        return self.transform(image)

    def __repr__(self) -> str:
        return f"Policy({self.transform!r})"
