"""Image transforms: the evaluation transform of the DML protocol, the pipeline policies build on, extra views.

Training augmentation policies are registered components (``register_augmentations``; the built-ins ``dml``,
``light`` and ``none``); the engine builds the one a recipe names (``[data] augment``) and the evaluation
transform of :func:`build_test_transform`, which every policy shares: a policy only chooses, with its
optional ``eval_crop`` attribute, between the protocol's shorter-side resize + centre crop (the default) and a
resize to a square. No torch at module level: torchvision is imported when a transform is built (the tensor
operations themselves live in :mod:`dmlplug.data.image_ops`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dmlplug.data.normalization import IMAGENET_MEAN, IMAGENET_STD


def normalized_pipeline(steps: Sequence[Any]) -> Callable[[Any], Any]:
    """``steps`` between the conversion to a uint8 tensor image and the conversion to a normalised float tensor.

    The generic pipeline for any ``torchvision.transforms.v2`` steps (a third-party policy's): the input, a PIL
    image or a ``C×H×W`` uint8 tensor (e.g. from ``torchvision.io.decode_jpeg``), is turned into a uint8 tensor,
    transformed by ``steps``, then converted to float and normalised with the ImageNet statistics. The built-in
    policies and the evaluation view use :class:`dmlplug.data.image_ops.TensorPipeline` instead, which gives
    the same tensors for their steps at a fraction of the per-image cost of the v2 transforms' dispatch. Random
    draws come from torch's default generator, which :class:`dmlplug.engine.seeding.SeededDataset` seeds per
    sample.

    Returns:
        A ``torchvision.transforms.v2.Compose`` whose ``tensor_input`` is ``True``.
    """
    import torch
    from torchvision.transforms import v2

    pipeline = v2.Compose([v2.ToImage(), *steps, v2.ToDtype(torch.float32, scale=True),
                           v2.Normalize(IMAGENET_MEAN, IMAGENET_STD), v2.ToPureTensor()])
    pipeline.tensor_input = True  # ToImage takes tensors as they are (HasTensorInput)
    return pipeline


def eval_steps(*, image_size: int, resize_size: int | None = None, crop: bool = True) -> list[Any]:
    """The geometry of the evaluation view, as :mod:`dmlplug.data.image_ops` steps (arguments as below)."""
    from dmlplug.data.image_ops import CenterCrop, Resize

    if crop:
        return [Resize(resize_size or round(image_size * 256 / 224)), CenterCrop(image_size)]
    return [Resize((image_size, image_size))]


def build_test_transform(*, image_size: int, resize_size: int | None = None, crop: bool = True) -> Callable[[Any], Any]:
    """The evaluation transform: image (PIL or ``C×H×W`` uint8 tensor) -> normalised ``3×S×S`` float tensor.

    A :class:`dmlplug.data.image_ops.TensorPipeline`: bilinear antialiased resize of the uint8 tensor, centre
    crop as a view, one float conversion and normalisation; its ``transforms`` are the torchvision v2 steps it
    equals bit for bit (what ``bundle.json`` describes).

    Args:
        image_size: Output side length ``S``.
        resize_size: Shorter-side resize before the centre crop; defaults to ``round(image_size * 256 / 224)``
            as in the standard protocol (256 for 224). Not used without ``crop``.
        crop: ``True``: resize the shorter side, then centre-crop ``S×S`` (the DML protocol); ``False``: resize
            to ``S×S`` (small images such as the glyphs, whose strokes reach the border).
    """
    from dmlplug.data.image_ops import TensorPipeline

    return TensorPipeline(eval_steps(image_size=image_size, resize_size=resize_size, crop=crop))


def eval_crop(augmentation: Any) -> bool:
    """Whether evaluation centre-crops for a built augmentation policy: its ``eval_crop`` attribute, default True."""
    from dmlplug.protocols import HasEvalCrop

    return bool(augmentation.eval_crop) if isinstance(augmentation, HasEvalCrop) else True


def accepts_tensors(transform: Any) -> bool:
    """Whether a built train transform takes a ``3×H×W`` uint8 tensor: its policies' ``tensor_input``.

    A policy without the attribute gets PIL images (:class:`dmlplug.protocols.HasTensorInput`); a
    :class:`MultiView` takes tensors only when all its transforms do.
    """
    from dmlplug.protocols import HasTensorInput

    if isinstance(transform, MultiView):
        return all(accepts_tensors(t) for t in transform.transforms)
    return bool(transform.tensor_input) if isinstance(transform, HasTensorInput) else False


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
