"""PML objects from validated Params: constructor arguments, context values and nested tables.

Nested tables are the distance, reducer and regularizer objects a loss or miner takes.

Imported only by the factories in :mod:`dmlplug_builtins.pml` (it imports torch and PML at module level).
"""

from __future__ import annotations

from typing import Any

import torch
from pytorch_metric_learning import distances, losses, miners, reducers, regularizers

from dmlplug.errors import ComponentError, DmlplugError
from dmlplug.params import Params
from dmlplug_builtins.pml import adapters
from dmlplug_builtins.pml.catalog import DISTANCES, REDUCERS, REGULARIZERS, RENAMED, PmlClass, by_name


def context_value(ctx: Any, field: str, who: str) -> Any:
    """A required build-context field, or a ComponentError that says what is missing."""
    value = getattr(ctx, field, None)
    if value is None:
        raise ComponentError(
            f"{who} needs {field} from the build context, which is not set",
            fix=f"build it inside a run, or pass {field}=... to dmlplug.create",
        )
    return value


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


def build_distance(table: Any) -> Any:
    """A PML distance from a validated ``distance`` table."""
    spec = by_name(DISTANCES)[table.name]
    kwargs = table.model_dump(exclude={"name"})
    return construct(getattr(distances, spec.cls), kwargs, f"distance {spec.name!r}")


def build_reducer(table: Any, ctx: Any) -> Any:
    """A PML reducer from a validated ``reducer`` table (composite reducers recurse)."""
    spec = by_name(REDUCERS)[table.name]
    kwargs: dict[str, Any] = {}
    if spec.name == "class_weighted":
        num_classes = context_value(ctx, "num_classes", "reducer 'class_weighted'")
        weights = table.weights if table.weights is not None else [1.0] * num_classes
        if len(weights) != num_classes:
            raise ComponentError(f"reducer 'class_weighted' has {len(weights)} weights for {num_classes} classes",
                                 fix="give one weight per training class, or none for equal weights")
        kwargs["weights"] = torch.tensor(weights, dtype=torch.float32)
    elif spec.name == "multiple":
        kwargs["reducers"] = {key: build_reducer(inner, ctx) for key, inner in table.reducers.items()}
        if table.default_reducer is not None:
            kwargs["default_reducer"] = build_reducer(table.default_reducer, ctx)
    elif spec.name == "per_anchor":
        if table.reducer is not None:
            kwargs["reducer"] = build_reducer(table.reducer, ctx)
    else:
        kwargs = table.model_dump(exclude={"name"})
    return construct(getattr(reducers, spec.cls), kwargs, f"reducer {spec.name!r}")


def build_pml_regularizer(name: str, values: dict[str, Any], ctx: Any, centers_per_class: int | None = None) -> Any:
    """A PML regularizer object from validated values (``centers_per_class`` from the owning loss)."""
    spec = by_name(REGULARIZERS)[name]
    kwargs = dict(values)
    who = f"regularizer {spec.name!r}"
    if spec.name == "sparse_centers":
        kwargs["num_classes"] = context_value(ctx, "num_classes", who)
        kwargs["centers_per_class"] = kwargs["centers_per_class"] or centers_per_class
        if not kwargs["centers_per_class"]:
            raise ComponentError(f"{who} needs centers_per_class",
                                 fix="use it with soft_triple / sub_center_arcface, or set centers_per_class")
    return construct(getattr(regularizers, spec.cls), kwargs, who)


def pml_kwargs(spec: PmlClass, params: Params, ctx: Any, who: str) -> dict[str, Any]:
    """Constructor keyword arguments of ``spec``: recipe values, context values and nested tables."""
    kwargs = {arg.name: getattr(params, arg.name) for arg in spec.args if (spec.cls, arg.name) not in RENAMED}
    for pml_arg, ctx_field in spec.from_ctx.items():
        kwargs[pml_arg] = context_value(ctx, ctx_field, who)
    if getattr(params, "distance", None) is not None:
        kwargs["distance"] = build_distance(params.distance)
    if getattr(params, "reducer", None) is not None:
        kwargs["reducer"] = build_reducer(params.reducer, ctx)
    centers = kwargs.get("centers_per_class") or kwargs.get("sub_centers")
    for which in ("embedding", "weight"):
        table = getattr(params, f"{which}_regularizer", None)
        if table is not None:
            values = table.model_dump(exclude={"name"})
            kwargs[f"{which}_regularizer"] = build_pml_regularizer(table.name, values, ctx, centers)
            kwargs[f"{which}_reg_weight"] = getattr(params, f"{which}_reg_weight")
    return kwargs


def pml_loss(spec: PmlClass, params: Params, ctx: Any) -> Any:
    """A catalogued PML loss, wrapped in its adapter when it has another calling convention."""
    who = f"loss {spec.name!r}"
    kwargs = pml_kwargs(spec, params, ctx, who)
    if spec.cls == "MarginLoss":
        kwargs["num_classes"] = context_value(ctx, "num_classes", who) if params.per_class_beta else None
    loss = construct(getattr(losses, spec.cls), kwargs, who)
    return getattr(adapters, spec.adapter)(loss) if spec.adapter else loss


def pml_miner(spec: PmlClass, params: Params, ctx: Any) -> Any:
    """A catalogued PML miner."""
    who = f"miner {spec.name!r}"
    return construct(getattr(miners, spec.cls), pml_kwargs(spec, params, ctx, who), who)


def require_pml_miner(miner: Any, who: str) -> Any:
    """``miner`` unchanged when it is ``None`` or a PML miner; a ComponentError otherwise."""
    if miner is not None and not isinstance(miner, miners.BaseMiner):
        raise ComponentError(f"{who} needs a pytorch-metric-learning miner (it passes reference embeddings)",
                             fix="choose one of the PML miners, e.g. {name = \"multi_similarity\"}")
    return miner
