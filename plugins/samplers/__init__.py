"""Built-in batch samplers: ``m_per_class``, ``class_random`` (SPC-k), ``random``, ``class_balanced``, ``hierarchical``.

Contract: the factory reads ``ctx.train_labels`` (int64 numpy), ``ctx.batch_size`` and ``ctx.seed`` and
returns an iterable of index lists with ``len()`` (batches per epoch) and ``set_epoch(epoch)``; the
batches of an epoch depend on ``(seed, epoch)`` only, and every batch holds exactly ``batch_size``
indices. This module holds the Params, the factories and the registration hook and stays light (no numpy
or torch at import); the sampler classes live in :mod:`.batch_samplers`, imported by the factories.

``hierarchical`` needs a super-class per training sample, read from ``ctx.train_super_labels`` (int64
array aligned with ``train_labels``); it declares ``requires=("dataset:super_labels",)``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from dmlplug import BuildContext, Params, hookimpl
from dmlplug.errors import ComponentError

_EPOCH = "Batches per epoch (default: floor(number of training samples / batch size))."


class RandomParams(Params):
    """Parameters of sampler 'random'."""

    batches_per_epoch: int | None = Field(None, gt=0, description=_EPOCH)


class MPerClassParams(RandomParams):
    """Parameters of sampler 'm_per_class'."""

    m: int = Field(4, gt=0, description="Samples per class in a batch (batch_size must be divisible by m).")

    def batch_size_multiple(self) -> int:
        """``m``: every batch holds ``batch_size / m`` classes."""
        return self.m

    def per_class_in_batch(self) -> int:
        """``m`` samples of every class in a batch."""
        return self.m


class ClassRandomParams(RandomParams):
    """Parameters of sampler 'class_random' (SPC-k, docs/methods/revisiting.md)."""

    k: int = Field(2, gt=0, description="Samples per class draw (SPC-k; batch_size must be divisible by k).")

    def batch_size_multiple(self) -> int:
        """``k``: every batch holds ``batch_size / k`` class draws."""
        return self.k

    def per_class_in_batch(self) -> int:
        """``k`` samples per class draw (a class drawn twice has ``2k``)."""
        return self.k


class HierarchicalParams(RandomParams):
    """Parameters of sampler 'hierarchical'."""

    m: int = Field(4, gt=0, description="Samples per class in a batch.")
    super_classes_per_batch: int = Field(2, gt=0, description="Distinct super-classes in every batch.")

    def batch_size_multiple(self) -> int:
        """``m * super_classes_per_batch``: each super-class fills an equal share of whole classes."""
        return self.m * self.super_classes_per_batch

    def per_class_in_batch(self) -> int:
        """``m`` samples per class group (a class picked twice has ``2m``)."""
        return self.m


def _common(ctx: BuildContext, who: str) -> tuple[Any, int, int]:
    import numpy as np

    labels, batch_size = ctx.require("train_labels"), ctx.require("batch_size")
    labels = np.asarray(labels, dtype=np.int64)
    if batch_size <= 0 or len(labels) == 0:
        raise ComponentError(f"sampler {who!r} needs a positive batch size and a non-empty training set")
    return labels, int(batch_size), int(ctx.seed)


def _warn_repeats(labels: Any, per_class: int, what: str, who: str) -> None:
    # Legal but unusual: a class with fewer images than a batch takes of it repeats images in that batch. The
    # recipe alone may not tell (dmlplug validate warns when the dataset declares its class sizes), the labels do.
    import logging  # here, not at module level: loading the plugin host would pay for it (CONTRIBUTING.md)

    import numpy as np

    counts = np.bincount(labels)
    small = counts[(counts > 0) & (counts < per_class)]
    if len(small):
        log = logging.getLogger("dmlplug.samplers")
        log.warning("warning: sampler %r takes %s = %d images of a class per batch, but %d of the %d training "
                    "classes have fewer (the smallest %d): their images repeat within a batch; use %s <= %d, or "
                    "more images per class", who, what, per_class, len(small), int((counts > 0).sum()),
                    int(small.min()), what, int(small.min()))


def _divisible(batch_size: int, group: int, what: str, who: str) -> None:
    if batch_size % group:
        raise ComponentError(f"sampler {who!r}: batch size {batch_size} is not divisible by {what} = {group}",
                             where=f"sampler.{what.split()[0]}",
                             fix=f"choose a batch size that is a multiple of {group}, or change {what}")


def build_random(params: RandomParams, ctx: BuildContext) -> Any:
    """Uniformly shuffled full batches."""
    from dmlplug_builtins.samplers.batch_samplers import RandomBatchSampler

    labels, batch_size, seed = _common(ctx, "random")
    return RandomBatchSampler(labels, batch_size, seed=seed, batches_per_epoch=params.batches_per_epoch)


def build_m_per_class(params: MPerClassParams, ctx: BuildContext) -> Any:
    """Batches of batch_size / m distinct classes with m samples each."""
    import numpy as np

    from dmlplug_builtins.samplers.batch_samplers import MPerClassSampler

    labels, batch_size, seed = _common(ctx, "m_per_class")
    _divisible(batch_size, params.m, "m", "m_per_class")
    classes = len(np.unique(labels))
    if batch_size // params.m > classes:
        # Suggest only layouts that keep two classes per batch (a pair loss needs a negative in every batch).
        raise ComponentError(
            f"sampler 'm_per_class' needs {batch_size // params.m} distinct classes per batch, "
            f"the training set has {classes}", where="[data] batch_size and [data.sampler] m",
            fix=f"use batch_size <= {classes * params.m} (a multiple of m = {params.m}, at least {2 * params.m} "
                "for two classes per batch), or a larger m that divides the batch size, at most "
                f"{batch_size // 2}")
    _warn_repeats(labels, params.m, "m", "m_per_class")
    return MPerClassSampler(labels, batch_size, params.m, seed=seed, batches_per_epoch=params.batches_per_epoch)


def build_class_random(params: ClassRandomParams, ctx: BuildContext) -> Any:
    """SPC-k: classes and samples drawn with replacement."""
    from dmlplug_builtins.samplers.batch_samplers import ClassRandomSampler

    labels, batch_size, seed = _common(ctx, "class_random")
    _divisible(batch_size, params.k, "k", "class_random")
    _warn_repeats(labels, params.k, "k", "class_random")
    return ClassRandomSampler(labels, batch_size, params.k, seed=seed, batches_per_epoch=params.batches_per_epoch)


def build_class_balanced(params: RandomParams, ctx: BuildContext) -> Any:
    """Samples weighted by the inverse size of their class."""
    from dmlplug_builtins.samplers.batch_samplers import ClassBalancedSampler

    labels, batch_size, seed = _common(ctx, "class_balanced")
    if batch_size > len(labels):
        raise ComponentError(f"sampler 'class_balanced': batch size {batch_size} exceeds the "
                             f"{len(labels)} training samples", fix="decrease the batch size")
    return ClassBalancedSampler(labels, batch_size, seed=seed, batches_per_epoch=params.batches_per_epoch)


def build_hierarchical(params: HierarchicalParams, ctx: BuildContext) -> Any:
    """Batches from a few super-classes, m samples per class."""
    import numpy as np

    from dmlplug_builtins.samplers.batch_samplers import HierarchicalSampler

    labels, batch_size, seed = _common(ctx, "hierarchical")
    super_labels = ctx.train_super_labels
    if super_labels is None or len(super_labels) != len(labels):
        raise ComponentError("sampler 'hierarchical' needs a super-class for every training sample",
                             where="build context train_super_labels",
                             fix="use a dataset that provides super-classes (e.g. SOP), or another sampler")
    _divisible(batch_size, params.m * params.super_classes_per_batch, "m * super_classes_per_batch",
               "hierarchical")
    available = len(np.unique(super_labels))
    if params.super_classes_per_batch > available:
        raise ComponentError(f"sampler 'hierarchical' wants {params.super_classes_per_batch} super-classes per "
                             f"batch, the training set has {available}", fix="lower super_classes_per_batch")
    _warn_repeats(labels, params.m, "m", "hierarchical")
    return HierarchicalSampler(labels, batch_size, super_labels, params.m, params.super_classes_per_batch,
                               seed=seed, batches_per_epoch=params.batches_per_epoch)


@hookimpl
def register_samplers(register: Any) -> None:
    """The built-in batch samplers."""
    register("m_per_class", build_m_per_class, params=MPerClassParams, tags=("equal_class_counts",),
             description="batch_size / m distinct classes, m samples each (PML MPerClassSampler), defined epoch.",
             aliases=("mperclass",))
    register("class_random", build_class_random, params=ClassRandomParams, aliases=("spc", "spc_k"),
             description="SPC-k (Roth et al. 2020, Revisiting DML): classes and samples drawn with "
                         "replacement (docs/methods/revisiting.md).")
    register("random", build_random, params=RandomParams,
             description="Uniformly shuffled samples, full batches.")
    register("class_balanced", build_class_balanced, params=RandomParams,
             description="Samples weighted by 1 / class size: every class equally likely.")
    register("hierarchical", build_hierarchical, params=HierarchicalParams, requires=("dataset:super_labels",),
             description="A few super-classes per batch, m samples per class (needs super-class labels).")
