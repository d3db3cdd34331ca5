"""Every pytorch-metric-learning loss, miner and regularizer by name.

* Losses: every class exported by ``pytorch_metric_learning.losses`` (see :mod:`.catalog` for the names;
  wrappers take nested ``loss`` / ``miner`` tables). PML's ``MarginLoss`` is ``pml_margin``: ``margin`` is
  the Revisiting-DML loss of :mod:`dmlplug_builtins.revisiting`.
* Miners: every PML miner (PML's ``DistanceWeightedMiner`` is ``pml_distance_weighted``; the Revisiting-DML
  miners are registered by :mod:`dmlplug_builtins.revisiting`).
* Regularizers: PML's regularizers applied to the step's embeddings or to the loss's class proxies.
* Distances, reducers and PML regularizers are also nested tables of losses and miners:
  ``[loss.distance] name = "cosine_similarity"``.

``num_classes`` and ``embedding_size`` are read from the build context, never from the recipe. This module
holds the Params, the factories and the registration hooks and stays torch-free; the factories import
:mod:`.builders` (torch and PML) inside their bodies, :mod:`.adapters` holds the wrapper modules.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

from pydantic import Field, create_model, model_validator

from dmlplug import Params, hookimpl
from dmlplug_builtins.pml.catalog import LOSSES, MINERS, REGULARIZERS, WRAPPERS, PmlClass, by_name
from dmlplug_builtins.pml.introspect import LossTable, MinerTable, PmlParams, camel, params_model

# ----------------------------------------------------------------------------------------------------------
# Params of the wrappers and of the step regularizers

_WRAPPER = by_name(WRAPPERS)


class CrossBatchMemoryParams(params_model(_WRAPPER["cross_batch_memory"], "loss")):
    """Parameters of loss 'cross_batch_memory'."""

    loss: LossTable = Field(default_factory=lambda: {"name": "contrastive"},
                            description="Inner loss table (a PML pair/triplet loss, e.g. contrastive).",
                            json_schema_extra={"nested": "loss"})
    miner: MinerTable | None = Field(None, description="Optional PML miner table mining against the memory.",
                                     json_schema_extra={"nested": "miner"})


class MultipleLossesParams(PmlParams):
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


class SelfSupervisedParams(params_model(_WRAPPER["self_supervised"], "loss")):
    """Parameters of loss 'self_supervised'."""

    loss: LossTable = Field(default_factory=lambda: {"name": "ntxent"},
                            description="Inner loss table (a PML pair/triplet loss, e.g. ntxent).",
                            json_schema_extra={"nested": "loss"})


def step_regularizer_params(spec: PmlClass) -> type[Params]:
    """The Params model of a PML regularizer used as a step regularizer: its arguments and a ``target``."""
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
    return create_model(f"{camel(spec.name)}RegularizerParams", __base__=PmlParams,
                        __doc__=f"Parameters of regularizer {spec.name!r}.", target=target_field, **fields)


# ----------------------------------------------------------------------------------------------------------
# Factories (torch and PML imported inside)


def build_pml_loss(spec: PmlClass, params: Params, ctx: Any) -> Any:
    """Factory of every catalogued PML loss."""
    from dmlplug_builtins.pml.builders import pml_loss

    return pml_loss(spec, params, ctx)


def build_pml_miner(spec: PmlClass, params: Params, ctx: Any) -> Any:
    """Factory of every catalogued PML miner."""
    from dmlplug_builtins.pml.builders import pml_miner

    return pml_miner(spec, params, ctx)


def build_cross_batch_memory(params: CrossBatchMemoryParams, ctx: Any) -> Any:
    """Cross-batch memory around a nested loss (and miner)."""
    from pytorch_metric_learning.losses import CrossBatchMemory

    from dmlplug_builtins.pml.builders import construct, context_value, require_pml_miner

    who = "loss 'cross_batch_memory'"
    miner = ctx.build("miners", params.miner) if params.miner else None
    return construct(CrossBatchMemory, {
        "loss": ctx.build("losses", params.loss),
        "embedding_size": context_value(ctx, "embedding_size", who),
        "memory_size": params.memory_size,
        "miner": require_pml_miner(miner, who),
    }, who)


def build_multiple_losses(params: MultipleLossesParams, ctx: Any) -> Any:
    """Weighted sum of nested losses."""
    from pytorch_metric_learning.losses import MultipleLosses

    from dmlplug_builtins.pml.builders import construct

    losses = [ctx.build("losses", table) for table in params.losses]
    miners = None
    if params.miners is not None:
        miners = [ctx.build("miners", table) if table else None for table in params.miners]
    return construct(MultipleLosses, {"losses": losses, "miners": miners, "weights": params.weights},
                     "loss 'multiple_losses'")


def build_self_supervised(params: SelfSupervisedParams, ctx: Any) -> Any:
    """PML's SelfSupervisedLoss with same-class pairs as the two views."""
    from pytorch_metric_learning.losses import SelfSupervisedLoss

    from dmlplug_builtins.pml.adapters import ClassPairsAsViews
    from dmlplug_builtins.pml.builders import construct

    inner = ctx.build("losses", params.loss)
    loss = construct(SelfSupervisedLoss, {"loss": inner, "symmetric": params.symmetric}, "loss 'self_supervised'")
    return ClassPairsAsViews(loss)


def build_step_regularizer(spec: PmlClass, params: Params, ctx: Any) -> Any:
    """A PML regularizer as a dmlplug regularizer (``forward(step)``)."""
    from dmlplug_builtins.pml.adapters import StepRegularizer
    from dmlplug_builtins.pml.builders import build_pml_regularizer, context_value

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

_WRAPPER_FACTORIES = {"cross_batch_memory": (build_cross_batch_memory, CrossBatchMemoryParams),
                      "multiple_losses": (build_multiple_losses, MultipleLossesParams),
                      "self_supervised": (build_self_supervised, SelfSupervisedParams)}


@hookimpl
def register_losses(register: Any) -> None:
    """Every PML loss and its wrappers."""
    for spec in LOSSES:
        register(spec.name, partial(build_pml_loss, spec), params=params_model(spec, "loss"),
                 description=spec.description, aliases=spec.aliases, tags=spec.tags, requires=spec.requires)
    for spec in WRAPPERS:
        factory, model = _WRAPPER_FACTORIES[spec.name]
        tags = ("uses_tuples",) if spec.name in ("cross_batch_memory", "multiple_losses") else ()
        register(spec.name, factory, params=model, description=spec.description, aliases=spec.aliases, tags=tags)


@hookimpl
def register_miners(register: Any) -> None:
    """Every PML miner."""
    for spec in MINERS:
        register(spec.name, partial(build_pml_miner, spec), params=params_model(spec, "miner"),
                 description=spec.description, aliases=spec.aliases, tags=spec.tags, requires=spec.requires)


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
        register(spec.name, partial(build_step_regularizer, spec), params=step_regularizer_params(spec),
                 description=f"PML {spec.cls}: {spec.description}", aliases=spec.aliases, requires=requires)
