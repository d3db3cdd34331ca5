"""Contract check of evaluators."""

from __future__ import annotations

import math
from typing import Any

from dmlplug.plugins import PluginHost
from dmlplug.protocols import HasRequiredK
from dmlplug.testing.fixtures import (
    EMBEDDING_SIZE,
    NUM_CLASSES,
    ContractError,
    Declared,
    build,
    expect,
    load_host,
    make_context,
)


def check_evaluator(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """An evaluator returns a dict of float metrics (NaN allowed, never inf), the same twice on the same data.

    The returned names must be exactly the declared ``Params.metric_names()`` (``dmlplug validate`` checks
    ``[evaluation] metric`` against them); an evaluator that declares ``()`` contributes only at the end of a
    run and returns an empty dict. An evaluator tagged
    ``needs_model`` (it adapts or re-embeds the model, e.g. ``fewshot``) must instead refuse saved embeddings
    with a :class:`~dmlplug.errors.DmlplugError`.
    """
    import numpy as np

    from dmlplug.errors import DmlplugError
    from dmlplug.evaluation import EvalContext
    from dmlplug.evaluation.runner import run_evaluators

    host = host or load_host()
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(NUM_CLASSES), 6)
    x = rng.normal(size=(len(labels), EMBEDDING_SIZE)) + 2.0 * rng.normal(size=(NUM_CLASSES, EMBEDDING_SIZE))[labels]
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    results = []
    before = {plugin_name for plugin_name, _ in host.pm.list_name_plugin()}
    needs_model = "needs_model" in host.registry.get("evaluators", name).tags
    try:
        if needs_model:
            evaluator = build("evaluators", name, make_context(host), **(params or {}))
            try:
                run_evaluators([evaluator], EvalContext(x, labels, backend="torch", seed=0))
            except DmlplugError:
                return
            raise ContractError(f"evaluator {name!r} is tagged needs_model but evaluated bare embeddings "
                                "without a clear error")
        for _ in range(2):
            evaluator = build("evaluators", name, make_context(host), **(params or {}))
            results.append(run_evaluators([evaluator], EvalContext(x, labels, backend="torch", seed=0)))
        returned = list(build("evaluators", name, make_context(host), **(params or {})).evaluate(
            EvalContext(x, labels, backend="torch", seed=0)))
    finally:
        # An evaluator may register itself for run hooks when built; no run follows here.
        for plugin_name, _ in host.pm.list_name_plugin():
            if plugin_name not in before:
                host.unregister_run_plugin(plugin_name)
    metrics = results[0]
    expect(isinstance(metrics, dict), f"evaluator {name!r}: evaluate must return a dict")
    declared_params = Declared(host, "evaluators", name, params).params
    reads = isinstance(evaluator, HasRequiredK)
    expect(reads == declared_params.reads_neighbours(),
           f"evaluator {name!r}: {'has' if reads else 'has no'} required_k (reads the kNN list), but "
           f"Params.reads_neighbours() returns {declared_params.reads_neighbours()}")
    declared = list(declared_params.metric_names())
    expect(returned == declared, f"evaluator {name!r}: returns {returned}, but Params.metric_names() declares "
                                 f"{declared}")
    for key, value in metrics.items():
        expect(isinstance(value, float) and not math.isinf(value), f"evaluator {name!r}: {key} = {value!r}")
    expect(str(results[0]) == str(results[1]), f"evaluator {name!r}: not deterministic: {results}")
