"""Image sources and dataset bundles (numpy + Pillow; torch only inside ``load_tensor``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


class ImageSource:
    """A finite, indexable set of labelled images.

    Subclasses set :attr:`labels` (int64 numpy array, classes re-indexed ``0 .. C-1`` within the
    split), :attr:`class_names` (index -> original class name) and implement :meth:`load_image`.

    Attributes:
        labels: int64 array of length ``len(self)``.
        class_names: Original class names; ``class_names[label]`` names a label.
        name: Human-readable name of the split for messages (``"cub200/train"``).
    """

    labels: np.ndarray
    class_names: list[str]
    name: str = ""

    def __len__(self) -> int:
        return int(len(self.labels))

    @property
    def num_classes(self) -> int:
        """Number of distinct classes in the split."""
        return len(self.class_names)

    def load_image(self, index: int) -> Any:
        """Return image ``index`` as an RGB ``PIL.Image.Image``."""
        raise NotImplementedError

    def describe(self, index: int) -> str:
        """Where image ``index`` comes from (a file path, an array slot), for error messages."""
        return f"{self.name}[{index}]"

    def subset(self, indices: np.ndarray, name: str | None = None) -> SubsetSource:
        """A view on some of the images, labels re-indexed ``0 .. C'-1`` in order of first class id."""
        return SubsetSource(self, np.asarray(indices, dtype=np.int64), name=name)


class SubsetSource(ImageSource):
    """Some images of another source, with labels re-indexed densely."""

    def __init__(self, parent: ImageSource, indices: np.ndarray, name: str | None = None):
        self.parent = parent
        self.indices = indices
        parent_labels = parent.labels[indices]
        kept = np.unique(parent_labels)
        remap = {int(c): i for i, c in enumerate(kept)}
        self.labels = np.asarray([remap[int(c)] for c in parent_labels], dtype=np.int64)
        self.class_names = [parent.class_names[int(c)] for c in kept]
        self.name = name or f"{parent.name}[subset]"

    def load_image(self, index: int) -> Any:
        """Image ``index`` of the subset."""
        return self.parent.load_image(int(self.indices[index]))

    def __getattr__(self, name: str) -> Any:
        # The fast tensor path (``load_tensor``, see FileImageSource) exists exactly when the parent has it,
        # so a subset of a file source keeps it; other names are not forwarded.
        parent = self.__dict__.get("parent")  # absent while unpickling
        if name == "load_tensor" and parent is not None and hasattr(parent, "load_tensor"):
            return self._load_tensor
        raise AttributeError(name)

    def _load_tensor(self, index: int) -> Any:
        parent: Any = self.parent  # __getattr__ hands this method out only when the parent has load_tensor
        return parent.load_tensor(int(self.indices[index]))

    def describe(self, index: int) -> str:
        """Where image ``index`` of the subset comes from."""
        return self.parent.describe(int(self.indices[index]))


class ArraySource(ImageSource):
    """Images held in memory as a ``N×H×W`` (greyscale) or ``N×H×W×3`` uint8 array."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, class_names: list[str], name: str = ""):
        if len(images) != len(labels):
            raise ValueError("images and labels differ in length")
        self.images = images
        self.labels = np.asarray(labels, dtype=np.int64)
        self.class_names = list(class_names)
        self.name = name

    def load_image(self, index: int) -> Any:
        """Image ``index`` as an RGB PIL image."""
        from PIL import Image

        array = self.images[index]
        image = Image.fromarray(array)
        return image.convert("RGB")

    def load_tensor(self, index: int) -> Any:
        """Image ``index`` as a ``3×H×W`` uint8 tensor: the pixels of :meth:`load_image` without the PIL round trip.

        The fast path of the loaders (``TransformedSource`` prefers it): the array is copied (a transform can
        never write into the dataset) and a greyscale image is expanded to three channels as a view, not
        copied three times. Treat the result as read-only. A subclass that overrides :meth:`load_image` gets
        its pixels here too, converted.
        """
        import torch

        array = self.images[index]
        if (type(self).load_image is not ArraySource.load_image or array.dtype != np.uint8
                or array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (3, 4))):
            return torch.from_numpy(np.array(self.load_image(index))).permute(2, 0, 1)  # what PIL's convert makes
        tensor = torch.from_numpy(array.copy())
        if array.ndim == 2:
            return tensor.unsqueeze(0).expand(3, -1, -1)
        return tensor.permute(2, 0, 1)[:3]  # RGBA: PIL's convert("RGB") drops alpha without compositing


@dataclass
class DatasetBundle:
    """The splits of one dataset as a recipe uses them.

    Attributes:
        train: Training images (class-disjoint from ``test`` in the usual zero-shot protocol).
        test: Evaluation images.
        val: Optional validation images (classes carved from training classes).
        test_query_mask: Optional boolean mask over ``test``: which images are queries. With
            ``test_gallery_mask`` it turns leave-one-out evaluation into query/gallery evaluation.
        test_gallery_mask: Optional boolean mask over ``test``: which images form the gallery.
        default_augment: Augmentation the dataset suits when the recipe says ``augment = "auto"``
            (``"dml"`` for natural photographs, ``"light"`` for small synthetic images).
        info: Free-form facts recorded in the run directory (root, layout, counts).
    """

    train: ImageSource
    test: ImageSource
    val: ImageSource | None = None
    test_query_mask: np.ndarray | None = None
    test_gallery_mask: np.ndarray | None = None
    default_augment: str = "dml"
    info: dict[str, Any] = field(default_factory=dict)
