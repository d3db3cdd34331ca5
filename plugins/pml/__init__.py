"""Every pytorch-metric-learning loss, miner, regularizer, distance and reducer by name.

* Losses: every class exported by ``pytorch_metric_learning.losses`` (see :mod:`.catalog` for the names;
  wrappers take nested ``loss`` / ``miner`` tables of any registered loss / miner). PML's ``MarginLoss`` is
  ``pml_margin``: ``margin`` is the Revisiting-DML loss of :mod:`dmlplug_builtins.revisiting`.
* Miners: every PML miner (PML's ``DistanceWeightedMiner`` is ``pml_distance_weighted``; the Revisiting-DML
  miners are registered by :mod:`dmlplug_builtins.revisiting`).
* Regularizers: PML's regularizers applied to the step's embeddings or to the loss's class proxies.
* Distances and reducers: registered kinds (``dmlplug list distances``), named in the nested tables of losses
  and miners, ``[loss.distance] name = "cosine_similarity"``; every PML loss and miner accepts any registered
  distance or reducer, a third-party one included. PML regularizers nest in losses too
  (``embedding_regularizer`` / ``weight_regularizer`` tables).

Argument names and defaults come from PML's own signatures (:mod:`.signatures`, stored per PML version), the
rest from :mod:`.catalog`. ``num_classes`` and ``embedding_size`` are read from the build context, never from the
recipe. This module holds the Params, the factories and the registration hooks and stays torch-free; the
factories import :mod:`.builders` (torch and PML) inside their bodies, :mod:`.adapters` holds the wrapper modules.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, Literal

from pydantic import Field, create_model, model_validator

from dmlplug import BuildContext, ComponentTable, Params, TableOf, default_table, hookimpl
from dmlplug.protocols import Register
from dmlplug_builtins.pml.catalog import (
    DISTANCES,
    LOSSES,
    MINERS,
    REDUCERS,
    REGULARIZERS,
    WRAPPERS,
    PmlClass,
    by_name,
)
from dmlplug_builtins.pml.introspect import (
    PmlParams,
    arg_field,
    camel,
    check_fits,
    deferred_params_model,
    params_model,
    pml_arguments,
)

# ----------------------------------------------------------------------------------------------------------
# Params of the wrappers, the composite reducers and the step regularizers

_WRAPPER = by_name(WRAPPERS)


# The bases are generated from PML's signatures when the plugin loads: mypy cannot see them statically.
class CrossBatchMemoryParams(params_model(_WRAPPER["cross_batch_memory"], "loss")):  # type: ignore[misc]
    """Parameters of loss 'cross_batch_memory'."""

    loss: Annotated[ComponentTable, TableOf("losses")] = Field(
        default=default_table("contrastive"),
        description="Inner loss table (a PML pair/triplet loss, e.g. contrastive).")
    miner: Annotated[ComponentTable, TableOf("miners")] | None = Field(
        None, description="Optional PML miner table mining against the memory.")


class MultipleLossesParams(PmlParams):
    """Parameters of loss 'multiple_losses'."""

    losses: list[Annotated[ComponentTable, TableOf("losses")]] = Field(
        default=[default_table("triplet_margin"), default_table("contrastive")], min_length=1,
        description="Loss tables, summed with their weights.")
    miners: list[Annotated[ComponentTable, TableOf("miners")] | None] | None = Field(
        None, description="One miner table (or {} for none) per loss; default: the recipe's miner for all.")
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


class SelfSupervisedParams(params_model(_WRAPPER["self_supervised"], "loss")):  # type: ignore[misc]
    """Parameters of loss 'self_supervised'."""

    loss: Annotated[ComponentTable, TableOf("losses")] = Field(
        default=default_table("ntxent"),
        description="Inner loss table (a PML pair/triplet loss, e.g. ntxent).")


#: Fields of the reducers that hold other reducers (any registered reducer, composite ones included).
_COMPOSITE_FIELDS: dict[str, dict[str, tuple[Any, Any]]] = {
    "multiple": {
        "reducers": (dict[str, Annotated[ComponentTable, TableOf("reducers")]], Field(
            default_factory=dict, description="Reducer per sub-loss name (e.g. pos_loss, neg_loss).")),
        "default_reducer": (Annotated[ComponentTable, TableOf("reducers")] | None, Field(
            None, description="Reducer of sub-losses not listed in reducers (default: mean).")),
    },
    "per_anchor": {
        "reducer": (Annotated[ComponentTable, TableOf("reducers")] | None, Field(
            None, description="Reducer applied to the per-anchor means (default: mean).")),
    },
}


def step_regularizer_params(spec: PmlClass) -> type[Params]:
    """The Params model of a PML regularizer used as a step regularizer: its arguments and a ``target``."""
    pml = pml_arguments(spec)
    default = "embeddings" if "embeddings" in spec.tags else "proxies"
    fields: dict[str, Any] = {arg.name: arg_field(arg, pml.get(arg.name), spec) for arg in spec.args}
    choices: Any
    if spec.name == "sparse_centers":
        choices, default, about = Literal["centers"], "centers", "All centres of the loss's classes."
    elif "embeddings" in spec.tags:
        choices = Literal["embeddings", "proxies"]
        about = "Regularise the batch embeddings or the loss's class proxies."
    else:
        choices, about = Literal["proxies"], "The loss's class proxies (C x D)."
    fields = {"target": (choices, Field(default, description=about)), **fields}
    model: type[Params] = create_model(f"{camel(spec.name)}RegularizerParams", __base__=PmlParams,
                                       __doc__=f"Parameters of regularizer {spec.name!r}.", **fields)
    return model


def deferred_step_regularizer_params(spec: PmlClass) -> Callable[[], type[Params]]:
    """:func:`step_regularizer_params` made on first read (as :func:`.introspect.deferred_params_model`)."""
    check_fits(spec)
    return partial(step_regularizer_params, spec)


# ----------------------------------------------------------------------------------------------------------
# Factories (torch and PML imported inside)


def build_pml_loss(spec: PmlClass, params: Params, ctx: BuildContext) -> Any:
    """Factory of every catalogued PML loss."""
    from dmlplug_builtins.pml.builders import pml_loss

    return pml_loss(spec, params, ctx)


def build_cross_batch_memory(params: CrossBatchMemoryParams, ctx: BuildContext) -> Any:
    """Cross-batch memory around a nested loss (and PML miner); ``embedding_size`` from the context."""
    return build_pml_loss(_WRAPPER["cross_batch_memory"], params, ctx)


def build_multiple_losses(params: MultipleLossesParams, ctx: BuildContext) -> Any:
    """Weighted sum of nested losses, each with its optional nested miner."""
    return build_pml_loss(_WRAPPER["multiple_losses"], params, ctx)


def build_self_supervised(params: SelfSupervisedParams, ctx: BuildContext) -> Any:
    """PML's SelfSupervisedLoss around a nested loss, with same-class pairs as the two views."""
    return build_pml_loss(_WRAPPER["self_supervised"], params, ctx)


def build_pml_miner(spec: PmlClass, params: Params, ctx: BuildContext) -> Any:
    """Factory of every catalogued PML miner."""
    from dmlplug_builtins.pml.builders import pml_miner

    return pml_miner(spec, params, ctx)


def build_pml_distance(spec: PmlClass, params: Params, ctx: BuildContext) -> Any:
    """Factory of every catalogued PML distance."""
    from dmlplug_builtins.pml.builders import pml_distance

    return pml_distance(spec, params, ctx)


def build_pml_reducer(spec: PmlClass, params: Params, ctx: BuildContext) -> Any:
    """Factory of every catalogued PML reducer (``class_weighted`` reads ``num_classes`` from the context)."""
    from dmlplug_builtins.pml.builders import pml_reducer

    return pml_reducer(spec, params, ctx)


def build_step_regularizer(spec: PmlClass, params: Params, ctx: BuildContext) -> Any:
    """A PML regularizer as a dmlplug regularizer (``forward(step)``)."""
    from dmlplug_builtins.pml.adapters import StepRegularizer
    from dmlplug_builtins.pml.builders import build_pml_regularizer

    who = f"regularizer {spec.name!r}"
    target = params.target  # type: ignore[attr-defined]
    loss = None
    centers = None
    if target != "embeddings":
        loss = ctx.require("loss")
        StepRegularizer.rows(loss, target, who)  # fails now rather than at the first step
        centers = getattr(loss, "centers_per_class", None) or getattr(loss, "sub_centers", None)
    values = params.model_dump(exclude={"target"})
    return StepRegularizer(build_pml_regularizer(spec, values, ctx, centers), target, loss, who)


# ----------------------------------------------------------------------------------------------------------
# Registration

_WRAPPER_FACTORIES: dict[str, tuple[Any, type[Params]]] = {
    "cross_batch_memory": (build_cross_batch_memory, CrossBatchMemoryParams),
    "multiple_losses": (build_multiple_losses, MultipleLossesParams),
    "self_supervised": (build_self_supervised, SelfSupervisedParams),
}


@hookimpl
def register_losses(register: Register) -> None:
    """Every PML loss and its wrappers."""
    for spec in LOSSES:
        register(spec.name, partial(build_pml_loss, spec), params=deferred_params_model(spec, "loss"),
                 description=spec.description, aliases=spec.aliases, tags=spec.tags, requires=spec.requires)
    for spec in WRAPPERS:
        factory, model = _WRAPPER_FACTORIES[spec.name]
        tags = ("uses_tuples",) if spec.name in ("cross_batch_memory", "multiple_losses") else ()
        register(spec.name, factory, params=model, description=spec.description, aliases=spec.aliases, tags=tags)


@hookimpl
def register_miners(register: Register) -> None:
    """Every PML miner."""
    for spec in MINERS:
        register(spec.name, partial(build_pml_miner, spec), params=deferred_params_model(spec, "miner"),
                 description=spec.description, aliases=spec.aliases, tags=spec.tags, requires=spec.requires)


@hookimpl
def register_distances(register: Register) -> None:
    """Every PML distance."""
    for spec in DISTANCES:
        register(spec.name, partial(build_pml_distance, spec),
                 params=deferred_params_model(spec, "distance", base=Params), description=spec.description,
                 aliases=spec.aliases, tags=spec.tags, requires=spec.requires)


@hookimpl
def register_reducers(register: Register) -> None:
    """Every PML reducer; ``multiple`` and ``per_anchor`` take nested reducer tables."""
    for spec in REDUCERS:
        model = deferred_params_model(spec, "reducer", extra=_COMPOSITE_FIELDS.get(spec.name), base=Params)
        register(spec.name, partial(build_pml_reducer, spec), params=model,
                 description=spec.description, aliases=spec.aliases, tags=spec.tags, requires=spec.requires)


@hookimpl
def register_regularizers(register: Register) -> None:
    """PML's regularizers, applied to the step's embeddings or to the loss's class proxies / centres."""
    for spec in REGULARIZERS:
        if spec.name == "sparse_centers":
            requires: tuple[str, ...] = ("loss:sub_centers",)
        elif "embeddings" in spec.tags:
            requires = ()
        else:
            requires = ("loss:proxies",)
        register(spec.name, partial(build_step_regularizer, spec), params=deferred_step_regularizer_params(spec),
                 description=f"PML {spec.cls}: {spec.description}", aliases=spec.aliases, requires=requires)
