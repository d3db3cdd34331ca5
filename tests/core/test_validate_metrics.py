"""Every built-in evaluator declares (``Params.metric_names()``) exactly the keys it returns.

``dmlplug validate`` checks ``[evaluation] metric`` against these declarations, so a wrong one would either
reject a good recipe or let a misspelt metric through to the run: each is compared with a real evaluation.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import dmlplug
from dmlplug.evaluation import EvalContext, run_evaluators
from dmlplug.plugins import get_host
from dmlplug.testing import check_evaluator

# Non-default parameters that change the keys, per evaluator.
VARIANTS = {
    "recall": [{"k": [3, 1]}],
    "retrieval": [{"k": [5]}],
    "map_at_1000": [{"k": 10, "normalizations": ["revisiting"]}],
    "map_at_c": [{"normalizations": ["standard"]}],
    "verification": [{"fars": [0.05, 0.2]}],
    "structure": [{"rho": [3]}],
}


def _builtin_evaluators() -> list[str]:
    registry = get_host().registry
    return sorted(info.name for info in registry.infos("evaluators")
                  if info.factory.__module__.startswith("dmlplug_builtins."))


def _context() -> EvalContext:
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(6), 10)
    embeddings = rng.normal(size=(len(labels), 8)).astype(np.float32) + labels[:, None] * 0.5
    return EvalContext(embeddings, labels, backend="torch", seed=0)


def _cases() -> list[tuple[str, dict]]:
    return [(name, params) for name in _builtin_evaluators() if name != "fewshot"
            for params in [{}, *VARIANTS.get(name, [])]]


def test_the_cases_cover_every_built_in_evaluator():
    names = {name for name, _ in _cases()}
    assert names | {"fewshot"} == set(_builtin_evaluators())
    assert {"recall", "retrieval", "map_at_r", "nmi", "verification", "opis", "structure"} <= names


@pytest.mark.parametrize(("name", "params"), _cases(), ids=lambda v: v if isinstance(v, str) else str(v or ""))
def test_declared_metric_names_are_the_returned_keys(name, params):
    # The plugin kit's check, the one third-party evaluators get: declared names == returned keys.
    check_evaluator(name, params=params)
    # Through the runner too (it adds excluded_queries beside kNN metrics, which is not an evaluator's).
    declared = get_host().registry.get("evaluators", name).validate(dict(params), where=name).metric_names()
    merged = run_evaluators([dmlplug.create("evaluator", name, **params)], _context())
    assert set(merged) - {"excluded_queries"} == set(declared)


def test_the_kit_catches_a_wrong_declaration():
    from dmlplug.testing import ContractError, load_host

    host = load_host()
    info = host.registry.get("evaluators", "recall")

    class Wrong(info.params):  # declares recall@1 only, returns recall@1 and recall@2
        def metric_names(self) -> tuple[str, ...]:
            return ("recall@1",)

    host.registry._tables["evaluators"]["recall_wrong"] = dataclasses.replace(info, name="recall_wrong",
                                                                             params=Wrong)
    try:
        with pytest.raises(ContractError, match=r"returns \['recall@1', 'recall@2'\], but Params.metric_names"):
            check_evaluator("recall_wrong", host=host, params={"k": [1, 2]})
    finally:
        del host.registry._tables["evaluators"]["recall_wrong"]


def test_the_kit_catches_an_undeclared_neighbour_reader():
    from dmlplug.testing import ContractError, load_host

    host = load_host()
    info = host.registry.get("evaluators", "map_at_r")

    class Silent(info.params):  # reads the kNN list (required_k) but says it does not: rerank would be refused
        def reads_neighbours(self) -> bool:
            return False

    host.registry._tables["evaluators"]["map_silent"] = dataclasses.replace(info, name="map_silent", params=Silent)
    try:
        with pytest.raises(ContractError, match=r"has required_k .* but Params.reads_neighbours\(\) returns False"):
            check_evaluator("map_silent", host=host)
    finally:
        del host.registry._tables["evaluators"]["map_silent"]


def test_fewshot_declares_no_per_epoch_metric():
    info = get_host().registry.get("evaluators", "fewshot")
    assert info.validate({}, where="fewshot").metric_names() == ()
    evaluator = dmlplug.create("evaluator", "fewshot")
    evaluator.start(run=None)  # inside a run its per-epoch evaluation contributes nothing
    assert evaluator.evaluate(_context()) == {}
