"""Image transforms: the evaluation transform of the DML protocol, the pipeline policies build on, extra views.

Training augmentation policies are registered components (``register_augmentations``; the built-ins ``dml``,
``light`` and ``none``); the engine builds the one a recipe names (``[data] augment``) and the evaluation
transform of :func:`build_test_transform`, which every policy shares: a policy only chooses, with its
optional ``eval_crop`` attribute, between the protocol's shorter-side resize + centre crop (the default) and a
resize to a square. No torch at module level: torchvision is imported when a transform is built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def normalized_pipeline(steps: Sequence[Any]) -> Callable[[Any], Any]:
    """``steps`` between the conversion to a uint8 tensor image and the conversion to a normalised float tensor.

    The input is a PIL image or a ``C×H×W`` uint8 tensor (e.g. from ``torchvision.io.decode_jpeg``). The image
    is turned into a uint8 tensor first and cropped, resized (bilinear, antialiased) and flipped as a tensor by
    ``steps`` (``torchvision.transforms.v2`` transforms), then converted to float and normalised with the
    ImageNet statistics: by measurement (``benchmarks/data_throughput.py``) the tensor kernels are faster than
    PIL's resize followed by ``ToTensor``, and the output of the crop is converted to float only once. Random
    draws come from torch's default generator, which :class:`dmlplug.engine.seeding.SeededDataset` seeds per
    sample.

    Returns:
        A ``torchvision.transforms.v2.Compose``.
    """
    import torch
    from torchvision.transforms import v2

    return v2.Compose([v2.ToImage(), *steps, v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(IMAGENET_MEAN, IMAGENET_STD), v2.ToPureTensor()])


def build_test_transform(*, image_size: int, resize_size: int | None = None, crop: bool = True) -> Callable[[Any], Any]:
    """The evaluation transform: image -> normalised ``3×S×S`` float tensor (see :func:`normalized_pipeline`).

    Args:
        image_size: Output side length ``S``.
        resize_size: Shorter-side resize before the centre crop; defaults to ``round(image_size * 256 / 224)``
            as in the standard protocol (256 for 224). Not used without ``crop``.
        crop: ``True``: resize the shorter side, then centre-crop ``S×S`` (the DML protocol); ``False``: resize
            to ``S×S`` (small images such as the glyphs, whose strokes reach the border).
    """
    from torchvision.transforms import v2

    if crop:
        resize = resize_size or round(image_size * 256 / 224)
        return normalized_pipeline([v2.Resize(resize, antialias=True), v2.CenterCrop(image_size)])
    return normalized_pipeline([v2.Resize((image_size, image_size), antialias=True)])


def eval_crop(augmentation: Any) -> bool:
    """Whether evaluation centre-crops for a built augmentation policy: its ``eval_crop`` attribute, default True."""
    from dmlplug.protocols import HasEvalCrop

    return bool(augmentation.eval_crop) if isinstance(augmentation, HasEvalCrop) else True


def random_sources(transform: Any) -> frozenset[str]:
    """The global generators a built train transform draws from: its policies' ``random_sources``.

    A policy without the attribute may draw from any of them (torch, python's ``random``, numpy), and all are
    seeded per sample; a :class:`MultiView` draws from the union of its transforms'.
    """
    from dmlplug.engine.seeding import RANDOM_SOURCES
    from dmlplug.protocols import HasRandomSources

    if isinstance(transform, MultiView):
        return frozenset().union(*(random_sources(t) for t in transform.transforms))
    return frozenset(transform.random_sources) if isinstance(transform, HasRandomSources) else RANDOM_SOURCES


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


def build_transform(
    mode: str, *, augment: str, image_size: int, resize_size: int | None = None
) -> Callable[[Any], Any]:
    """The training or evaluation transform of the registered augmentation policy ``augment``.

    The policy is built by the process-wide plugin host (``dmlplug.create("augmentation", augment, ...)``), so
    any installed policy works; a run builds its own through its recipe instead.

    Args:
        mode: ``"train"``: the policy itself; ``"test"``: :func:`build_test_transform` with the policy's
            ``eval_crop``.
        augment: A registered augmentation (``"dml"``, ``"light"``, ``"none"`` …; see
            ``dmlplug list augmentations``).
        image_size: Output side length.
        resize_size: Shorter-side resize before the evaluation's centre crop (see :func:`build_test_transform`).

    Raises:
        ValueError: ``mode`` is neither ``"train"`` nor ``"test"``.
        dmlplug.errors.ComponentError: No augmentation of that name.
    """
    if mode not in ("train", "test"):
        raise ValueError(f"mode must be 'train' or 'test', got {mode!r}")
    policy = _policy(augment, image_size)
    if mode == "train":
        return policy
    return build_test_transform(image_size=image_size, resize_size=resize_size, crop=eval_crop(policy))


def build_train_views(
    *, augment: str, image_size: int, views: int = 1, view_augment: str | None = None, ctx: Any = None
) -> Callable[[Any], Any]:
    """The training transform, with ``views - 1`` extra independently augmented views on request.

    Args:
        augment: Augmentation of the main view (a registered policy, see :func:`build_transform`).
        image_size: Output side length of every view.
        views: Total number of views per image; ``1`` returns the plain transform (a tensor), more
            returns a :class:`MultiView` (a tuple of tensors).
        view_augment: Augmentation of the extra views; defaults to the main policy's ``view_augment``
            attribute (``none`` says ``dml``: an un-augmented second view would equal the first), else
            ``augment``.
        ctx: A :class:`~dmlplug.context.BuildContext` whose registry builds the policies (a run's); default
            the process-wide plugin host's.
    """
    main = _policy(augment, image_size, ctx)
    return with_views(main, views, lambda named: _policy(view_augment or named or augment, image_size, ctx))


def with_views(main: Any, views: int, extra: Callable[[str | None], Any]) -> Any:
    """``main`` for one view; for more, a :class:`MultiView` of ``main`` and ``views - 1`` policies ``extra(name)``.

    The one rule of the extra views, for :func:`build_train_views` and the engine (which builds its policies
    from the recipe): ``name`` is the main policy's ``view_augment`` when it names one, else ``None`` (the
    caller's default, usually the main policy again).

    Raises:
        ValueError: ``views`` is below 1.
    """
    if views < 1:
        raise ValueError(f"views must be at least 1, got {views}")
    if views == 1:
        return main
    named = getattr(main, "view_augment", None) or None
    return MultiView([main] + [extra(named) for _ in range(views - 1)])


def _policy(name: str, image_size: int, ctx: Any = None) -> Any:
    from dmlplug.context import BuildContext
    from dmlplug.plugins import get_host

    # build_train_views is public API: without a context it builds with the process's host, as dmlplug.create does.
    return (ctx or BuildContext(host=get_host())).build("augmentations", {"name": name}, image_size=image_size)
