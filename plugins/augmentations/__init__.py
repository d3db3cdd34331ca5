"""Built-in training augmentation policies: ``dml``, ``light`` and ``none`` (``[data] augment = "..."``).

A policy factory gets ``ctx.require("image_size")`` and returns a callable: PIL image (or ``C×H×W`` uint8
tensor) -> normalised ``3×S×S`` float tensor (:class:`dmlplug.protocols.Augmentation`), built from the lean
steps of :mod:`dmlplug.data.image_ops`: the same tensors as the torchvision v2 transforms of the same names,
from the same random draws, at a fraction of their per-image cost. Evaluation's transform stays the engine's
(:func:`dmlplug.data.transforms.build_test_transform`); a policy only says, with its ``eval_crop`` attribute,
whether evaluation resizes the shorter side and centre-crops (the DML protocol) or resizes to a square, and with
``view_augment`` which policy the extra views of a component that asks for them use. This module holds the
Params, the factories and the registration hook and stays torch-free; the policy class lives in :mod:`.policies`.
"""

from __future__ import annotations

from typing import Any

from dmlplug import BuildContext, Params, hookimpl


def build_dml(params: Params, ctx: BuildContext) -> Any:
    """Random-resized crop (torchvision defaults) + horizontal flip; evaluation: resize + centre crop."""
    from dmlplug.data.image_ops import HorizontalFlip, RandomResizedCrop
    from dmlplug_builtins.augmentations.policies import Policy

    size = ctx.require("image_size")
    return Policy([RandomResizedCrop(size), HorizontalFlip()], eval_crop=True)


def build_light(params: Params, ctx: BuildContext) -> Any:
    """A mild random-resized crop (scale 0.7–1, no flip: glyphs are not mirror-symmetric); evaluation: resize."""
    from dmlplug.data.image_ops import RandomResizedCrop
    from dmlplug_builtins.augmentations.policies import Policy

    size = ctx.require("image_size")
    return Policy([RandomResizedCrop(size, scale=(0.7, 1.0), ratio=(0.9, 1.1))], eval_crop=False)


def build_none(params: Params, ctx: BuildContext) -> Any:
    """No augmentation: training sees the evaluation view; extra views use ``dml``.

    The evaluation view is a resize to S×S, or, when the recipe sets ``[data] resize_size``, the protocol's
    shorter-side resize to it and a centre crop.
    """
    from dmlplug.data.transforms import eval_steps
    from dmlplug_builtins.augmentations.policies import Policy

    size = ctx.require("image_size")
    crop = ctx.resize_size is not None
    # An un-augmented extra view would equal the first: the views a component asks for are augmented by dml.
    return Policy(eval_steps(image_size=size, resize_size=ctx.resize_size, crop=crop), eval_crop=crop,
                  view_augment="dml")


@hookimpl
def register_augmentations(register: Any) -> None:
    """Register the built-in augmentation policies."""
    register("dml", build_dml,
             description="Random-resized crop + horizontal flip; evaluation: shorter-side resize + centre crop.")
    register("light", build_light,
             description="Mild random-resized crop (scale 0.7-1, no flip); evaluation: resize to S×S.")
    register("none", build_none, description="No augmentation: training sees the evaluation view (resize to S×S, or "
                                             "shorter-side resize_size + centre crop).")
