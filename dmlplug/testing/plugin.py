"""Every check by component kind, and :func:`check_plugin`: all components of one plugin."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from dmlplug.protocols.kinds import KINDS
from dmlplug.registry import normalize_kind
from dmlplug.testing.codecs import check_index_codec
from dmlplug.testing.datasets import check_dataset
from dmlplug.testing.evaluators import check_evaluator
from dmlplug.testing.fixtures import expect, load_host, plugin_name
from dmlplug.testing.geometry import check_distance, check_reducer
from dmlplug.testing.heads import check_head
from dmlplug.testing.loggers import check_logger
from dmlplug.testing.losses import check_loss, check_miner
from dmlplug.testing.regularizers import check_regularizer
from dmlplug.testing.retrieval import check_reranker
from dmlplug.testing.samplers import check_sampler
from dmlplug.testing.training import check_augmentation, check_lr_schedule, check_optimizer
from dmlplug.testing.tuning import check_tune_pruner, check_tune_sampler

#: The contract check of each component kind that has one.
CHECKS: dict[str, Callable[..., None]] = {
    "losses": check_loss, "miners": check_miner, "regularizers": check_regularizer, "samplers": check_sampler,
    "evaluators": check_evaluator, "heads": check_head, "loggers": check_logger, "distances": check_distance,
    "reducers": check_reducer, "optimizers": check_optimizer, "lr_schedules": check_lr_schedule,
    "augmentations": check_augmentation, "datasets": check_dataset, "rerankers": check_reranker,
    "tune_samplers": check_tune_sampler, "tune_pruners": check_tune_pruner, "index_codecs": check_index_codec,
}


def check_component(kind: str, name: str, **kwargs: Any) -> None:
    """Run the contract check of ``kind`` on component ``name`` (``kwargs`` go to the check).

    Raises:
        ContractError: The component breaks the contract, or there is no check for ``kind`` (backbones need
            weights: test them with a tiny recipe).
    """
    kind = normalize_kind(kind)
    expect(kind in CHECKS, f"no contract check for {kind}; checked kinds: {sorted(CHECKS)}")
    CHECKS[kind](name, **kwargs)


def check_plugin(plugin: str | ModuleType | Any, **kwargs: Any) -> list[tuple[str, str]]:
    """Load ``plugin`` next to the built-ins and check every component it registers.

    Args:
        plugin: The plugin module (or its import name).
        **kwargs: Per-component options, keyed ``"<kind>.<name>"`` (e.g. ``{"regularizers.my_reg":
            {"head": {...}}}``) passed as ``**kwargs`` to the check.

    Returns:
        The ``(kind, name)`` pairs checked.

    Raises:
        ContractError: The plugin fails to load, registers nothing, or a component breaks its contract.
    """
    host = load_host(plugin)
    name = plugin_name(importlib.import_module(plugin) if isinstance(plugin, str) else plugin)
    checked = []
    for kind in KINDS:
        for info in host.registry.infos(kind):
            if info.plugin != name or kind not in CHECKS:
                continue
            CHECKS[kind](info.name, host=host, **kwargs.get(f"{kind}.{info.name}", {}))
            checked.append((kind, info.name))
    expect(checked, f"plugin {name!r} registers no component with a contract check")
    return checked
