"""Every component kind, once: its plural and singular names and the Protocol its components are checked against.

This table is the one list of kinds: the registry's tables, ``dmlplug list``, the plugin kit, the generated docs
and the host's ``register_<kind>`` calls are all made from it (a test holds the hooks in
:mod:`dmlplug.hookspecs` to it).
"""

from __future__ import annotations

from dataclasses import dataclass

from dmlplug.protocols.components import (
    Augmentation,
    Backbone,
    BatchSampler,
    Dataset,
    Distance,
    Evaluator,
    Head,
    Logger,
    Loss,
    LRSchedule,
    Miner,
    Optimizer,
    Reducer,
    Regularizer,
)
from dmlplug.protocols.retrieval import IndexCodec, Reranker
from dmlplug.protocols.tuning import TunePruner, TuneSampler


@dataclass(frozen=True)
class Kind:
    """One component kind.

    Attributes:
        name: The plural name (``"losses"``): the registry's table, ``dmlplug list losses``, ``register_losses``.
        singular: How messages and recipes say one of them (``"loss"``).
        protocol: What every built component of the kind is checked against.
    """

    name: str
    singular: str
    protocol: type


#: Every kind, in the order ``dmlplug list`` and docs/hooks.md show them.
KIND_TABLE: tuple[Kind, ...] = (
    Kind("backbones", "backbone", Backbone),
    Kind("heads", "head", Head),
    Kind("losses", "loss", Loss),
    Kind("miners", "miner", Miner),
    Kind("regularizers", "regularizer", Regularizer),
    Kind("evaluators", "evaluator", Evaluator),
    Kind("datasets", "dataset", Dataset),
    Kind("samplers", "sampler", BatchSampler),
    Kind("loggers", "logger", Logger),
    Kind("distances", "distance", Distance),
    Kind("reducers", "reducer", Reducer),
    Kind("optimizers", "optimizer", Optimizer),
    Kind("lr_schedules", "lr_schedule", LRSchedule),
    Kind("augmentations", "augmentation", Augmentation),
    Kind("rerankers", "reranker", Reranker),
    Kind("index_codecs", "index_codec", IndexCodec),
    Kind("tune_samplers", "tune_sampler", TuneSampler),
    Kind("tune_pruners", "tune_pruner", TunePruner),
)

#: The plural names, in order.
KINDS: tuple[str, ...] = tuple(kind.name for kind in KIND_TABLE)

#: The Protocol every built component of a kind is checked against.
KIND_PROTOCOLS: dict[str, type] = {kind.name: kind.protocol for kind in KIND_TABLE}
