"""The PML catalogue matches the installed pytorch-metric-learning and covers all of it."""

from __future__ import annotations

import inspect

import pytest
from pytorch_metric_learning import distances, losses, miners, reducers, regularizers

from dmlplug.testing import load_host
from dmlplug_builtins.pml.catalog import (
    DISTANCES,
    LOSSES,
    MINERS,
    NOT_COMPONENTS,
    REDUCERS,
    REGULARIZERS,
    RENAMED,
    REQUIRED,
    SAME,
    WRAPPERS,
)

HOST = load_host()

TABLES = [(losses, LOSSES + WRAPPERS), (miners, MINERS), (distances, DISTANCES), (reducers, REDUCERS),
          (regularizers, REGULARIZERS)]
ALL_SPECS = [(module, spec) for module, table in TABLES for spec in table]


@pytest.mark.parametrize(("module", "table"), TABLES, ids=lambda x: getattr(x, "__name__", ""))
def test_every_exported_class_is_catalogued(module, table):
    exported = {n for n, o in vars(module).items() if inspect.isclass(o) and o.__module__.startswith(module.__name__)}
    catalogued = {spec.cls for spec in table}
    assert exported - NOT_COMPONENTS == catalogued


def _signature(cls) -> dict[str, object]:
    """Constructor arguments of a PML class, following ``*args`` / ``**kwargs`` up the class hierarchy."""
    import torch

    params = {}
    for klass in cls.__mro__:
        if klass is torch.nn.Module:
            break
        if "__init__" not in vars(klass):
            continue
        sig = inspect.signature(klass.__init__)
        for p in sig.parameters.values():
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "self" and p.name not in params:
                params[p.name] = REQUIRED if p.default is p.empty else p.default
        if not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values()):
            break
    return params


#: Constructor arguments with no recipe role: wrapped components (nested tables), callables, internals.
INTERNAL = {"loss", "losses", "miner", "miners", "weights", "reducers", "default_reducer", "reducer",
            "aggregation_func", "num_classes", "is_inverted", "collect_stats", "weight_init_func", "distance",
            "embedding_regularizer", "embedding_reg_weight", "weight_regularizer", "weight_reg_weight",
            "mat_based_loss",  # fixed by each GenericPairLoss subclass
            # CosineSimilarity fixes normalize_embeddings; the p of a similarity only normalises.
            "normalize_embeddings", "p"}


@pytest.mark.parametrize(("module", "spec"), ALL_SPECS, ids=lambda x: getattr(x, "name", ""))
def test_catalogue_arguments_match_the_installed_signature(module, spec):
    signature = _signature(getattr(module, spec.cls))
    covered = set(spec.from_ctx)
    for arg in spec.args:
        pml_name = RENAMED.get((spec.cls, arg.name), arg.name)
        assert pml_name in signature, f"{spec.cls} has no argument {pml_name!r}"
        expected = arg.default if arg.pml_default is SAME else arg.pml_default
        assert signature[pml_name] == expected or signature[pml_name] is expected, (spec.cls, arg.name)
        assert arg.description.strip()
        covered.add(pml_name)
    fixed_by_subclass = {"BatchHardMiner": {"pos_strategy", "neg_strategy"}, "AvgNonZeroReducer": {"low", "high"}}
    allowed = INTERNAL | fixed_by_subclass.get(spec.cls, set())
    assert set(signature) - covered <= allowed, f"{spec.cls}: {set(signature) - covered}"


@pytest.mark.parametrize("spec", LOSSES + MINERS, ids=lambda s: s.name)
def test_nested_tables_follow_the_class_hierarchy(spec):
    """A loss exposes distance/reducer/regularizer tables exactly when its PML base classes take them."""
    from pytorch_metric_learning.losses import BaseMetricLossFunction, WeightRegularizerMixin
    from pytorch_metric_learning.miners import BaseMiner

    cls = getattr(losses if spec in LOSSES else miners, spec.cls)
    expected = set()
    if issubclass(cls, BaseMetricLossFunction):
        expected |= {"distance", "reducer", "embedding_regularizer"}
    if issubclass(cls, WeightRegularizerMixin):
        expected.add("weight_regularizer")
    if issubclass(cls, BaseMiner) and spec.cls != "EmbeddingsAlreadyPackagedAsTriplets":
        expected.add("distance")
    if spec.adapter == "ClassPairsAsViews":
        expected = set()  # VICReg compares two views; a distance or reducer table has no meaning there
    assert set(spec.nested) == expected


def test_every_registered_parameter_is_described():
    for kind in ("losses", "miners", "regularizers", "samplers"):
        for info in HOST.registry.infos(kind):
            assert info.description, f"{kind}/{info.name}"
            for field_name, field in info.params.model_fields.items():
                assert field.description and field.description.strip(), f"{kind}/{info.name}.{field_name}"


def test_context_values_are_not_recipe_parameters():
    for kind in ("losses", "miners", "regularizers"):
        for info in HOST.registry.infos(kind):
            if info.plugin == "pml":
                context_only = {"num_classes", "embedding_size", "descriptors_dim", "l", "K"}
                assert not context_only & set(info.params.model_fields), info.name


def test_every_mechanical_snake_case_name_resolves():
    import re

    def snake(name: str) -> str:
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()

    for kind, table in (("losses", LOSSES + WRAPPERS), ("miners", MINERS)):
        for spec in table:
            assert HOST.registry.get(kind, snake(spec.cls)).name == spec.name, spec.cls
