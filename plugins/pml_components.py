"""Every pytorch-metric-learning loss, miner and regularizer by name, plus the Revisiting-DML options.

* Losses: every class exported by ``pytorch_metric_learning.losses`` (see :mod:`.pml_catalog` for the
  names; wrappers take nested ``loss`` / ``miner`` tables) and ``margin``, the Revisiting-DML margin
  loss with learnable β (METHODS §8.5; PML's own class is ``pml_margin``).
* Miners: every PML miner, and the Revisiting-DML miners ``distance_weighted`` (§8.2; PML's is
  ``pml_distance_weighted``), ``rho_distance`` (§8.4), ``semihard``, ``softhard`` and ``random_triplets`` (§8.3).
  "R-Margin" is ``loss = margin`` with ``miner = rho_distance``.
* Regularizers: PML's regularizers applied to the step's embeddings or to the loss's class proxies.
* Distances, reducers and PML regularizers are also nested tables of losses and miners:
  ``[loss.distance] name = "cosine_similarity"``.

``num_classes`` and ``embedding_size`` are read from the build context, never from the recipe.
Torch and PML are imported inside the factories only.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

from pydantic import Field, model_validator

from dmlplug import Params, hookimpl
from dmlplug.errors import ComponentError, DmlplugError
from dmlplug_builtins.pml_catalog import LOSSES, MINERS, REDUCERS, REGULARIZERS, RENAMED, WRAPPERS, PmlClass, by_name
from dmlplug_builtins.pml_introspect import LossTable, MinerTable, params_model

# ----------------------------------------------------------------------------------------------------------
# Build helpers (torch imported lazily)


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
    from pytorch_metric_learning import distances

    from dmlplug_builtins.pml_catalog import DISTANCES

    spec = by_name(DISTANCES)[table.name]
    kwargs = table.model_dump(exclude={"name"})
    return construct(getattr(distances, spec.cls), kwargs, f"distance {spec.name!r}")


def build_reducer(table: Any, ctx: Any) -> Any:
    """A PML reducer from a validated ``reducer`` table (composite reducers recurse)."""
    import torch
    from pytorch_metric_learning import reducers

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
    from pytorch_metric_learning import regularizers

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


def build_pml_loss(spec: PmlClass, params: Params, ctx: Any) -> Any:
    """Factory of every catalogued PML loss."""
    from pytorch_metric_learning import losses

    who = f"loss {spec.name!r}"
    kwargs = pml_kwargs(spec, params, ctx, who)
    if spec.cls == "MarginLoss":
        kwargs["num_classes"] = context_value(ctx, "num_classes", who) if params.per_class_beta else None
    loss = construct(getattr(losses, spec.cls), kwargs, who)
    return _adapt(spec, loss)


def build_pml_miner(spec: PmlClass, params: Params, ctx: Any) -> Any:
    """Factory of every catalogued PML miner."""
    from pytorch_metric_learning import miners

    who = f"miner {spec.name!r}"
    return construct(getattr(miners, spec.cls), pml_kwargs(spec, params, ctx, who), who)


def _adapt(spec: PmlClass, loss: Any) -> Any:
    if not spec.adapter:
        return loss
    from dmlplug_builtins import pml_adapters

    return getattr(pml_adapters, spec.adapter)(loss)


def build_nested(kind: str, table: dict[str, Any], ctx: Any) -> Any:
    """Build a nested ``{name = ..., **params}`` component table through the registry."""
    from dmlplug.plugins import get_host

    host = getattr(ctx, "host", None) or get_host()
    info = host.registry.get(kind, table["name"])
    rest = {k: v for k, v in table.items() if k != "name"}
    return info.build(info.validate(rest, where=f"{kind}[{info.name}]"), ctx)


def _require_pml_miner(miner: Any, who: str) -> Any:
    from pytorch_metric_learning.miners import BaseMiner

    if miner is not None and not isinstance(miner, BaseMiner):
        raise ComponentError(f"{who} needs a pytorch-metric-learning miner (it passes reference embeddings)",
                             fix="choose one of the PML miners, e.g. {name = \"multi_similarity\"}")
    return miner


# ----------------------------------------------------------------------------------------------------------
# Wrappers and the Revisiting-DML components


_WRAPPER = by_name(WRAPPERS)


class CrossBatchMemoryParams(params_model(_WRAPPER["cross_batch_memory"], "loss")):
    """Parameters of loss 'cross_batch_memory'."""

    loss: LossTable = Field(default_factory=lambda: {"name": "contrastive"},
                            description="Inner loss table (a PML pair/triplet loss, e.g. contrastive).",
                            json_schema_extra={"nested": "loss"})
    miner: MinerTable | None = Field(None, description="Optional PML miner table mining against the memory.",
                                     json_schema_extra={"nested": "miner"})


def build_cross_batch_memory(params: CrossBatchMemoryParams, ctx: Any) -> Any:
    """Cross-batch memory around a nested loss (and miner)."""
    from pytorch_metric_learning.losses import CrossBatchMemory

    who = "loss 'cross_batch_memory'"
    miner = build_nested("miners", params.miner, ctx) if params.miner else None
    return construct(CrossBatchMemory, {
        "loss": build_nested("losses", params.loss, ctx),
        "embedding_size": context_value(ctx, "embedding_size", who),
        "memory_size": params.memory_size,
        "miner": _require_pml_miner(miner, who),
    }, who)


class MultipleLossesParams(Params):
    """Parameters of loss 'multiple_losses'."""

    losses: list[LossTable] = Field(
        default_factory=lambda: [{"name": "triplet_margin"}, {"name": "contrastive"}], min_length=1,
        description="Loss tables, summed with their weights.", json_schema_extra={"nested": "loss"})
    miners: list[MinerTable | None] | None = Field(
        None, description="One miner table (or {} for none) per loss; default: the recipe's miner for all.",
        json_schema_extra={"nested": "miner"})
    weights: list[float] | None = Field(None, description="One weight per loss (default: 1 each).")

    @model_validator(mode="before")
    @classmethod
    def _empty_miner_means_none(cls, data: Any) -> Any:
        # TOML has no null: an empty table {} stands for "no miner for this loss".
        if isinstance(data, dict) and isinstance(data.get("miners"), list):
            data = {**data, "miners": [m if m else None for m in data["miners"]]}
        return data

    @model_validator(mode="after")
    def _lengths_match(self) -> MultipleLossesParams:
        for key in ("miners", "weights"):
            value = getattr(self, key)
            if value is not None and len(value) != len(self.losses):
                raise ValueError(f"{key} has {len(value)} entries for {len(self.losses)} losses")
        return self


def build_multiple_losses(params: MultipleLossesParams, ctx: Any) -> Any:
    """Weighted sum of nested losses."""
    from pytorch_metric_learning.losses import MultipleLosses

    losses = [build_nested("losses", table, ctx) for table in params.losses]
    miners = None
    if params.miners is not None:
        miners = [build_nested("miners", t, ctx) if t else None for t in params.miners]
    return construct(MultipleLosses, {"losses": losses, "miners": miners, "weights": params.weights},
                     "loss 'multiple_losses'")


class SelfSupervisedParams(params_model(_WRAPPER["self_supervised"], "loss")):
    """Parameters of loss 'self_supervised'."""

    loss: LossTable = Field(default_factory=lambda: {"name": "ntxent"},
                            description="Inner loss table (a PML pair/triplet loss, e.g. ntxent).",
                            json_schema_extra={"nested": "loss"})


def build_self_supervised(params: SelfSupervisedParams, ctx: Any) -> Any:
    """PML's SelfSupervisedLoss with same-class pairs as the two views."""
    from pytorch_metric_learning.losses import SelfSupervisedLoss

    from dmlplug_builtins.pml_adapters import ClassPairsAsViews

    inner = build_nested("losses", params.loss, ctx)
    loss = construct(SelfSupervisedLoss, {"loss": inner, "symmetric": params.symmetric}, "loss 'self_supervised'")
    return ClassPairsAsViews(loss)


class MarginParams(Params):
    """Parameters of loss 'margin' (Revisiting-DML, METHODS §8.5)."""

    margin: float = Field(0.2, ge=0, description="Triplet margin alpha.")
    beta: float = Field(1.2, description="Initial class boundary beta_0 (Revisiting: 1.2, alternative 0.6).")
    learn_beta: bool = Field(True, description="Learn beta (own parameter group, no weight decay).")
    per_class_beta: bool = Field(True, description="One beta per training class, else one shared beta.")
    nu: float = Field(0.0, ge=0, description="Weight of the beta regulariser nu * sum(beta_{y_a}).")
    normalizer: Literal["terms", "triplets"] = Field(
        "terms", description='Divide by the number of positive hinge terms ("terms", METHODS/PML) or of '
                             'triplets with a positive term ("triplets", the reference code).')


def build_margin(params: MarginParams, ctx: Any) -> Any:
    """Margin loss with learnable beta."""
    from dmlplug_builtins.revisiting_margin import RevisitingMarginLoss

    return RevisitingMarginLoss(num_classes=context_value(ctx, "num_classes", "loss 'margin'"),
                                **params.model_dump())


class DistanceWeightedParams(Params):
    """Parameters of miner 'distance_weighted' (METHODS §8.2)."""

    lower_cutoff: float = Field(0.5, gt=0, lt=2, description="Lower distance cut-off lambda.")
    upper_cutoff: float | None = Field(
        None, gt=0, description="Never sample negatives at or beyond this distance (paper 1.4; off in the code).")
    anchors: Literal["all", "with_positive"] = Field(
        "all", description='"all" (Revisiting; lone samples are their own positive) or "with_positive" '
                           "(DiVA/ooDML).")


class RhoDistanceParams(DistanceWeightedParams):
    """Parameters of miner 'rho_distance' (METHODS §8.4)."""

    p_switch: float = Field(0.2, ge=0, le=1, description="Probability of the (a, a, same-class) negative swap.")


class SemihardParams(Params):
    """Parameters of miner 'semihard' (METHODS §8.3)."""

    margin: float = Field(0.2, gt=0, description="Semi-hard band width (the loss's triplet margin).")


class RandomTripletsParams(Params):
    """Parameters of miner 'random_triplets' (METHODS §8.3)."""

    num_triplets: int | None = Field(None, gt=0, description="Triplets per batch (default: the batch size).")


def build_revisiting_miner(class_name: str, params: Params, ctx: Any) -> Any:
    """Factory of the Revisiting-DML miners."""
    from dmlplug_builtins import revisiting_miners

    return getattr(revisiting_miners, class_name)(**params.model_dump())


# ----------------------------------------------------------------------------------------------------------
# Regularizers on the training step


def _step_regularizer_params(spec: PmlClass) -> type[Params]:
    default = "embeddings" if "embeddings" in spec.tags else "proxies"
    fields: dict[str, Any] = {arg.name: (arg.type, Field(arg.default, description=arg.description))
                              for arg in spec.args}
    if spec.name == "sparse_centers":
        target_field = (Literal["centers"], Field("centers", description="All centres of the loss's classes."))
    elif "embeddings" in spec.tags:
        target_field = (Literal["embeddings", "proxies"], Field(
            default, description="Regularise the batch embeddings or the loss's class proxies."))
    else:
        target_field = (Literal["proxies"], Field(default, description="The loss's class proxies (C x D)."))
    from pydantic import create_model

    from dmlplug_builtins.pml_introspect import camel

    return create_model(f"{camel(spec.name)}RegularizerParams", __base__=Params,
                        __doc__=f"Parameters of regularizer {spec.name!r}.", target=target_field, **fields)


def build_step_regularizer(spec: PmlClass, params: Params, ctx: Any) -> Any:
    """A PML regularizer as a dmlplug regularizer (``forward(step)``)."""
    from dmlplug_builtins.pml_adapters import StepRegularizer

    who = f"regularizer {spec.name!r}"
    loss = None
    centers = None
    if params.target != "embeddings":
        loss = context_value(ctx, "loss", who)
        StepRegularizer.rows(loss, params.target, who)  # fails now rather than at the first step
        centers = getattr(loss, "centers_per_class", None) or getattr(loss, "sub_centers", None)
    values = params.model_dump(exclude={"target"})
    return StepRegularizer(build_pml_regularizer(spec.name, values, ctx, centers), params.target, loss, who)


# ----------------------------------------------------------------------------------------------------------
# Registration

_MARGIN_TAGS = ("uses_tuples", "has_parameters", "needs_num_classes")
_REVISITING_MINERS = (
    ("distance_weighted", "DistanceWeightedMiner", DistanceWeightedParams,
     "Distance-weighted triplets exactly as Revisiting-DML (METHODS 8.2); one triplet per anchor.", ()),
    ("rho_distance", "RhoDistanceMiner", RhoDistanceParams,
     "Distance-weighted triplets with the rho-regularisation swap (METHODS 8.4); R-Margin = margin + this.",
     ("rho",)),
    ("semihard", "SemihardMiner", SemihardParams,
     "Revisiting semi-hard triplets: one random positive, a negative in (d_ap, d_ap + margin) (METHODS 8.3).",
     ("semihard_revisiting",)),
    ("softhard", "SofthardMiner", Params,
     "Revisiting soft-hard triplets: random hard positive and hard negative per anchor (METHODS 8.3).",
     ("softhard_revisiting",)),
    ("random_triplets", "RandomTripletMiner", RandomTripletsParams,
     "Valid triplets drawn uniformly without replacement (METHODS 8.3).", ("random",)),
)


@hookimpl
def register_losses(register: Any) -> None:
    """Every PML loss, its wrappers, and the Revisiting margin loss."""
    for spec in LOSSES:
        register(spec.name, partial(build_pml_loss, spec), params=params_model(spec, "loss"),
                 description=spec.description, aliases=spec.aliases, tags=spec.tags, requires=spec.requires)
    wrappers = {"cross_batch_memory": (build_cross_batch_memory, CrossBatchMemoryParams),
                "multiple_losses": (build_multiple_losses, MultipleLossesParams),
                "self_supervised": (build_self_supervised, SelfSupervisedParams)}
    for spec in WRAPPERS:
        factory, model = wrappers[spec.name]
        tags = ("uses_tuples",) if spec.name in ("cross_batch_memory", "multiple_losses") else ()
        register(spec.name, factory, params=model, description=spec.description, aliases=spec.aliases, tags=tags)
    register("margin", build_margin, params=MarginParams, tags=_MARGIN_TAGS,
             description="Margin loss with learnable per-class beta, exactly as Revisiting-DML (METHODS 8.5).",
             aliases=("revisiting_margin",))


@hookimpl
def register_miners(register: Any) -> None:
    """Every PML miner and the Revisiting-DML miners."""
    for spec in MINERS:
        register(spec.name, partial(build_pml_miner, spec), params=params_model(spec, "miner"),
                 description=spec.description, aliases=spec.aliases, tags=spec.tags, requires=spec.requires)
    for name, class_name, model, description, aliases in _REVISITING_MINERS:
        register(name, partial(build_revisiting_miner, class_name), params=model, description=description,
                 aliases=aliases, tags=("triplets", "rho_swap") if name == "rho_distance" else ("triplets",))


@hookimpl
def register_regularizers(register: Any) -> None:
    """PML's regularizers, applied to the step's embeddings or to the loss's class proxies / centres."""
    for spec in REGULARIZERS:
        if spec.name == "sparse_centers":
            requires = ("loss:sub_centers",)
        elif "embeddings" in spec.tags:
            requires = ()
        else:
            requires = ("loss:proxies",)
        register(spec.name, partial(build_step_regularizer, spec), params=_step_regularizer_params(spec),
                 description=f"PML {spec.cls}: {spec.description}", aliases=spec.aliases, requires=requires)
