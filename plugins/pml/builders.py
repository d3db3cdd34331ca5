"""PML objects from validated Params: constructor arguments, context values and nested tables.

A Params field named like a PML constructor argument is passed to it, nested tables built first: a
:class:`~dmlplug.ComponentTable` (a distance, reducer, or a wrapper's loss / miner) with ``ctx.build``, a
nested PML-regulariser table as a PML regulariser object. Arguments the catalogue fills from the build context
are read with ``ctx.require``.

Imported only by the factories in :mod:`dmlplug_builtins.pml` (it imports torch and PML at module level).
"""

from __future__ import annotations

from typing import Any

import torch
from pytorch_metric_learning import distances, losses, miners, reducers, regularizers

from dmlplug import ComponentTable
from dmlplug.context import BuildContext
from dmlplug.errors import ComponentError, DmlplugError
from dmlplug.params import Params
from dmlplug_builtins.pml import adapters
from dmlplug_builtins.pml.catalog import REGULARIZERS, PmlClass, by_name, module_of
from dmlplug_builtins.pml.introspect import pml_arguments

_MODULES = {"losses": losses, "miners": miners, "distances": distances, "reducers": reducers,
            "regularizers": regularizers}


def pml_class(spec: PmlClass) -> type:
    """The PML class of a catalogue entry."""
    return getattr(_MODULES[module_of(spec)], spec.cls)


def construct(cls: Any, kwargs: dict[str, Any], who: str) -> Any:
    """Call a PML constructor, turning its assertion / value errors into a ComponentError."""
    try:
        return cls(**kwargs)
    except DmlplugError:
        raise
    except Exception as exc:  # PML validates with assert / ValueError / bare Exception
        detail = str(exc).strip() or type(exc).__name__
        raise ComponentError(f"cannot build {who}: {detail}",
                             fix="check its parameters and nested distance / reducer / regularizer tables") from exc


def build_pml_regularizer(spec: PmlClass, values: dict[str, Any], ctx: BuildContext,
                          centers_per_class: int | None = None) -> Any:
    """A PML regularizer object from validated values (``centers_per_class`` from the owning loss)."""
    who = f"regularizer {spec.name!r}"
    kwargs = dict(values)
    for pml_arg, ctx_field in spec.from_ctx.items():
        kwargs[pml_arg] = ctx.require(ctx_field)  # type: ignore[call-overload]
    if "centers_per_class" in kwargs:
        kwargs["centers_per_class"] = kwargs["centers_per_class"] or centers_per_class
        if not kwargs["centers_per_class"]:
            raise ComponentError(f"{who} needs centers_per_class",
                                 fix="use it with soft_triple / sub_center_arcface, or set centers_per_class")
    return construct(pml_class(spec), kwargs, who)


def pml_value(value: Any, ctx: BuildContext, centers_per_class: int | None) -> Any:
    """A validated field value as a PML constructor takes it: nested tables built, other values as they are."""
    if isinstance(value, ComponentTable):
        return ctx.build(value.kind, value)
    if isinstance(value, Params):  # a nested PML-regulariser table (introspect.regularizer_table)
        spec = by_name(REGULARIZERS)[value.name]  # type: ignore[attr-defined]
        return build_pml_regularizer(spec, value.model_dump(exclude={"name"}), ctx, centers_per_class)
    if isinstance(value, list):
        return [pml_value(v, ctx, centers_per_class) for v in value]
    if isinstance(value, dict):
        return {k: pml_value(v, ctx, centers_per_class) for k, v in value.items()}
    return value


def pml_kwargs(spec: PmlClass, params: Params, ctx: BuildContext) -> dict[str, Any]:
    """Constructor keyword arguments of ``spec``: recipe values, nested tables built, and context values.

    Every field named like an argument of the class's signature is passed (recipe-only fields such as
    ``per_class_beta`` are not); the catalogue's ``from_ctx`` arguments come from ``ctx.require``.
    """
    arguments = pml_arguments(spec)
    values = {name: getattr(params, name) for name in type(params).model_fields if name in arguments}
    centers = values.get("centers_per_class") or values.get("sub_centers")
    kwargs = {name: pml_value(value, ctx, centers) for name, value in values.items()}
    for pml_arg, ctx_field in spec.from_ctx.items():
        kwargs[pml_arg] = ctx.require(ctx_field)  # type: ignore[call-overload]
    return kwargs


def pml_loss(spec: PmlClass, params: Params, ctx: BuildContext) -> Any:
    """A catalogued PML loss (or wrapper), wrapped in its adapter when it has another calling convention."""
    who = f"loss {spec.name!r}"
    kwargs = pml_kwargs(spec, params, ctx)
    if spec.cls == "MarginLoss":  # its recipe argument per_class_beta stands for num_classes
        kwargs["num_classes"] = ctx.require("num_classes") if params.per_class_beta else None  # type: ignore[attr-defined]
    if spec.cls == "CrossBatchMemory":
        require_pml_miner(kwargs["miner"], who)
    loss = construct(pml_class(spec), kwargs, who)
    return getattr(adapters, spec.adapter)(loss) if spec.adapter else loss


def pml_miner(spec: PmlClass, params: Params, ctx: BuildContext) -> Any:
    """A catalogued PML miner."""
    return construct(pml_class(spec), pml_kwargs(spec, params, ctx), f"miner {spec.name!r}")


def pml_distance(spec: PmlClass, params: Params, ctx: BuildContext) -> Any:
    """A catalogued PML distance."""
    return construct(pml_class(spec), pml_kwargs(spec, params, ctx), f"distance {spec.name!r}")


def pml_reducer(spec: PmlClass, params: Params, ctx: BuildContext) -> Any:
    """A catalogued PML reducer (composite reducers get their nested reducers built)."""
    who = f"reducer {spec.name!r}"
    kwargs = pml_kwargs(spec, params, ctx)
    if spec.cls == "ClassWeightedReducer":  # a list in the recipe, one weight per class, a tensor for PML
        num_classes = ctx.require("num_classes")
        weights = kwargs["weights"] if kwargs["weights"] is not None else [1.0] * num_classes
        if len(weights) != num_classes:
            raise ComponentError(f"{who} has {len(weights)} weights for {num_classes} classes",
                                 fix="give one weight per training class, or none for equal weights")
        kwargs["weights"] = torch.tensor(weights, dtype=torch.float32)
    return construct(pml_class(spec), kwargs, who)


def require_pml_miner(miner: Any, who: str) -> Any:
    """``miner`` unchanged when it is ``None`` or a PML miner; a ComponentError otherwise."""
    if miner is not None and not isinstance(miner, miners.BaseMiner):
        raise ComponentError(f"{who} needs a pytorch-metric-learning miner (it passes reference embeddings)",
                             fix="choose one of the PML miners, e.g. {name = \"multi_similarity\"}")
    return miner
