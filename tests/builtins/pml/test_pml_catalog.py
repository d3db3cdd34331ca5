"""The PML catalogue covers all of the installed pytorch-metric-learning, and the registered Params models are
PML's own signatures: every constructor argument has exactly one role, and recipe defaults are PML's."""

from __future__ import annotations

import inspect

import pytest
from pytorch_metric_learning import distances, losses, miners, reducers, regularizers

from dmlplug.tables import table_kind
from dmlplug.testing import load_host
from dmlplug_builtins.pml.catalog import (
    KEPT_EVERYWHERE,
    LOSSES,
    MINERS,
    NOT_COMPONENTS,
    PML,
    TABLES,
    WRAPPERS,
    module_of,
)
from dmlplug_builtins.pml.introspect import REGULARIZER_ARGS, TABLE_ARGS, regularizer_models
from dmlplug_builtins.pml.signatures import REQUIRED, signatures

HOST = load_host()
SIGNATURES = signatures()
MODULES = {"losses": losses, "miners": miners, "distances": distances, "reducers": reducers,
           "regularizers": regularizers}
ALL_SPECS = [spec for table in TABLES.values() for spec in table]
#: Fields of a registered model that are no PML argument: a step regularizer's target.
NOT_ARGUMENTS = {"target"}


def registered_models(spec) -> list[type]:
    """The Params models built from ``spec``: its registered component's (a regulariser's nested table too)."""
    models = [HOST.registry.get(module_of(spec), spec.name).params]
    if module_of(spec) == "regularizers":
        models.append(regularizer_models()[spec.name])
    return models


@pytest.mark.parametrize("module", list(MODULES))
def test_every_exported_class_is_catalogued(module):
    pml = MODULES[module]
    exported = {n for n, o in vars(pml).items() if inspect.isclass(o) and o.__module__.startswith(pml.__name__)}
    assert exported - NOT_COMPONENTS == {spec.cls for spec in TABLES[module]}


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: f"{module_of(s)}.{s.name}")
def test_every_argument_has_exactly_one_role(spec):
    """A Params field, filled from the context, decided by a recipe-only argument, or kept at PML's default."""
    arguments = SIGNATURES.args(module_of(spec), spec.cls)
    stand_ins = {arg.stands_for for arg in spec.args if arg.stands_for}
    # The catalogue names no argument the class does not have.
    for name in [*spec.from_ctx, *spec.keep, *stand_ins, *(a.name for a in spec.args if not a.stands_for)]:
        assert name in arguments, f"{spec.cls} has no argument {name!r}"
    for model in registered_models(spec):
        fields = set(model.model_fields) - {"name"}  # a nested regulariser table's name is no argument
        for name in arguments:
            roles = {"field": name in fields, "context": name in spec.from_ctx, "stand-in": name in stand_ins,
                     "kept": spec.kept(name)}
            assert sum(roles.values()) == 1, f"{spec.cls}.{name}: {roles}"
        recipe_only = {arg.name for arg in spec.args if arg.stands_for}
        assert fields - set(arguments) <= recipe_only | NOT_ARGUMENTS, f"{spec.cls}: {fields - set(arguments)}"


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: f"{module_of(s)}.{s.name}")
def test_recipe_defaults_are_pmls_unless_the_catalogue_says_otherwise(spec):
    arguments = SIGNATURES.args(module_of(spec), spec.cls)
    own_default = {arg.name for arg in spec.args if arg.default is not PML}
    for model in registered_models(spec):
        for name, field in model.model_fields.items():
            if name not in arguments or name in own_default:
                continue
            default = field.get_default(call_default_factory=True)
            if default is not None and table_kind(field.rebuild_annotation()):
                continue  # nested tables with a default of their own: a wrapper's inner loss, MultipleReducers'
            pml_default = arguments[name].default
            assert pml_default is not REQUIRED, f"{spec.cls}.{name}: PML has no default, the catalogue gives none"
            assert default == pml_default and (default is None) == (pml_default is None), (spec.cls, name)
    for arg in spec.args:
        assert arg.description.strip()
        if arg.default is not PML and not arg.stands_for:
            # A recipe default of its own where PML has none, or one that differs from PML's on purpose.
            pml_default = arguments[arg.name].default
            assert pml_default is REQUIRED or pml_default != arg.default, f"{spec.cls}.{arg.name}: say default=PML"


def test_arguments_kept_everywhere_exist():
    every = {name for module, by_class in SIGNATURES.classes.items() for args in by_class.values() for name in
             (a.name for a in args)}
    assert set(KEPT_EVERYWHERE) <= every


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
    fields = set(HOST.registry.get(module_of(spec), spec.name).params.model_fields)
    assert fields & {*TABLE_ARGS, *REGULARIZER_ARGS} == expected


def test_wrappers_take_nested_tables_of_any_registered_component():
    for name, field, kind in (("cross_batch_memory", "loss", "losses"), ("cross_batch_memory", "miner", "miners"),
                              ("multiple_losses", "losses", "losses"), ("multiple_losses", "miners", "miners"),
                              ("self_supervised", "loss", "losses")):
        spec = HOST.registry.get("losses", name).params.model_fields[field]
        assert table_kind(spec.rebuild_annotation()) == kind, (name, field)
    assert {spec.name for spec in WRAPPERS} == {"cross_batch_memory", "multiple_losses", "self_supervised"}


def test_every_registered_parameter_is_described():
    for kind in ("losses", "miners", "regularizers", "samplers", "distances", "reducers"):
        for info in HOST.registry.infos(kind):
            assert info.description, f"{kind}/{info.name}"
            for field_name, field in info.params.model_fields.items():
                assert field.description and field.description.strip(), f"{kind}/{info.name}.{field_name}"


def test_context_values_are_not_recipe_parameters():
    for kind in ("losses", "miners", "regularizers", "distances", "reducers"):
        for info in HOST.registry.infos(kind):
            if info.plugin == "pml":
                context_only = {"num_classes", "embedding_size", "descriptors_dim", "l", "K"}
                assert not context_only & set(info.params.model_fields), info.name


def test_every_mechanical_snake_case_name_resolves():
    import re

    def snake(name: str) -> str:
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()

    for module, table in TABLES.items():
        for spec in table:
            assert HOST.registry.get(module, snake(spec.cls)).name == spec.name, spec.cls
