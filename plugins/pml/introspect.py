"""Params models of the PML catalogue: PML's signatures (names, defaults) plus the catalogue (types, descriptions).

Everything here is torch-free: the models are generated from :mod:`.catalog` and the stored signatures of the
installed PML (:mod:`.signatures`), each the first time it is read (the plugin registers
:func:`deferred_params_model`; whether PML fits the catalogue is checked when the plugin loads), and validate
recipes before anything heavy is imported.

Arguments of a class become fields as follows:
    * an :class:`~dmlplug_builtins.pml.catalog.Arg` of the catalogue: a field of its type, with PML's default
      (or the catalogue's recipe default);
    * ``distance`` / ``reducer``: a nested component table, ``Annotated[ComponentTable, TableOf("distances")]``
      / ``TableOf("reducers")``, so any registered distance or reducer is accepted, e.g.
      ``[loss.distance] name = "cosine_similarity"``;
    * ``embedding_regularizer`` / ``weight_regularizer``: a nested PML-regulariser table (a discriminated union on
      ``name`` of the regularizers of the catalogue, a PML object rather than a registered step regularizer) and
      its ``*_reg_weight``;
    * arguments filled from the build context or kept at PML's default (:attr:`PmlClass.keep`) are no fields.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from functools import cache, partial
from typing import Annotated, Any, Literal, Union

from pydantic import Field, create_model

from dmlplug import ComponentTable, TableOf
from dmlplug.errors import PluginError
from dmlplug.params import Params
from dmlplug_builtins.pml.catalog import PML, REGULARIZERS, Arg, PmlClass, module_of
from dmlplug_builtins.pml.signatures import REQUIRED, PmlArg, signatures

#: Arguments that hold a registered component, by kind.
TABLE_ARGS: dict[str, str] = {"distance": "distances", "reducer": "reducers"}
#: Arguments that hold a PML regulariser object, and the argument of its weight.
REGULARIZER_ARGS: dict[str, str] = {"embedding_regularizer": "embedding_reg_weight",
                                    "weight_regularizer": "weight_reg_weight"}


def camel(name: str) -> str:
    """``"proxy_anchor"`` -> ``"ProxyAnchor"`` (model names shown in validation errors)."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def pml_arguments(spec: PmlClass) -> dict[str, PmlArg]:
    """The constructor arguments of ``spec``'s class in the installed PML, by name.

    Raises:
        PluginError: The installed PML has no such class (the catalogue does not fit this PML version).
    """
    sigs = signatures()
    try:
        return sigs.args(module_of(spec), spec.cls)
    except KeyError:
        raise PluginError(f"pytorch-metric-learning {sigs.version} has no {module_of(spec)}.{spec.cls}",
                          fix="install the pytorch-metric-learning version of dmlplug's constraints") from None


def recipe_default(arg: Arg, pml: PmlArg | None, spec: PmlClass) -> Any:
    """The recipe default of ``arg``: the catalogue's, else PML's (an ``int`` default of a float field as float).

    Raises:
        PluginError: PML has no such argument, or no default and the catalogue gives none.
    """
    if arg.default is not PML:
        return arg.default
    if pml is None or pml.default is REQUIRED:
        problem = "no argument" if pml is None else "no default for"
        raise PluginError(f"pytorch-metric-learning {signatures().version}'s {spec.cls} has {problem} "
                          f"{arg.name!r}, which dmlplug's catalogue expects",
                          fix="install the pytorch-metric-learning version of dmlplug's constraints")
    value = pml.default
    union = typing.get_origin(arg.type) in (Union, types.UnionType)
    accepted = typing.get_args(arg.type) if union else (arg.type,)
    if isinstance(value, int) and not isinstance(value, bool) and float in accepted and int not in accepted:
        return float(value)  # PML writes `margin=0` for a float margin
    return value


def arg_field(arg: Arg, pml: PmlArg | None, spec: PmlClass) -> tuple[Any, Any]:
    """The ``(type, FieldInfo)`` pair of one catalogue argument."""
    return arg.type, Field(recipe_default(arg, pml, spec), description=arg.description)


@cache
def regularizer_models() -> dict[str, type[Params]]:
    """Models of the PML-regulariser tables nested in losses, by canonical name (``name`` plus its arguments)."""
    models = {}
    for spec in REGULARIZERS:
        names = (spec.name, *spec.aliases)
        pml = pml_arguments(spec)
        fields: dict[str, Any] = {
            "name": (Literal[names], Field(description=f"Regularizer name: {' / '.join(names)}.")),
        }
        fields.update({arg.name: arg_field(arg, pml.get(arg.name), spec) for arg in spec.args})
        models[spec.name] = create_model(f"{camel(spec.name)}RegularizerTable", __base__=Params,
                                         __doc__=spec.description, **fields)
    return models


@cache
def regularizer_table() -> Any:
    """Type of an ``embedding_regularizer`` / ``weight_regularizer`` table (a PML regulariser)."""
    return Annotated[Union[tuple(regularizer_models().values())], Field(discriminator="name")]  # noqa: UP007


def nested_fields(spec: PmlClass, pml: dict[str, PmlArg]) -> dict[str, tuple[Any, Any]]:
    """The nested tables of ``spec`` (the arguments of its signature that take PML objects) as Params fields."""
    fields: dict[str, tuple[Any, Any]] = {}
    if "distance" in pml and not spec.kept("distance"):
        fields["distance"] = (Annotated[ComponentTable, TableOf("distances")] | None, Field(
            None, description='Distance table, e.g. {name = "cosine_similarity"}; default: the class default.'))
    if "reducer" in pml and not spec.kept("reducer"):
        fields["reducer"] = (Annotated[ComponentTable, TableOf("reducers")] | None, Field(
            None, description='Reducer table, e.g. {name = "mean"}; default: the class default.'))
    for which, target in (("embedding", "the embeddings"), ("weight", "the class weights")):
        table, weight = f"{which}_regularizer", f"{which}_reg_weight"
        if table in pml and not spec.kept(table):
            fields[table] = (regularizer_table() | None, Field(
                None, description=f'PML regulariser of {target}, e.g. {{name = "lp"}}; default: none.'))
            default = pml[weight].default if weight in pml else 1.0
            fields[weight] = (float, Field(float(default), description=f"Weight of the {which} regulariser term."))
    return fields


class PmlParams(Params):
    """Parameters of an adapted pytorch-metric-learning class."""

    def optimizer_group_names(self, section: str) -> tuple[str, ...]:
        """A PML loss's parameters (ArcFace weights, proxies …), if it has any, form one group: ``section``."""
        return (section,)


def check_fits(spec: PmlClass) -> None:
    """Check, without making a model, that the installed PML has ``spec``'s class and every argument it needs.

    Raises:
        PluginError: As :func:`params_model` would (the catalogue does not fit this PML version).
    """
    pml = pml_arguments(spec)
    for arg in spec.args:
        recipe_default(arg, pml.get(arg.stands_for or arg.name), spec)


def deferred_params_model(spec: PmlClass, kind: str, extra: dict[str, tuple[Any, Any]] | None = None,
                          base: type[Params] = PmlParams) -> Callable[[], type[Params]]:
    """:func:`params_model` as ``register`` takes it: made the first time it is read, checked now.

    Making the models of the whole catalogue cost more than the rest of the host's start-up together; a command
    reads the few its recipe names. Whether the installed PML fits the catalogue is still checked when the plugin
    loads (:func:`check_fits`), so a mismatch stays the plugin's load error.
    """
    check_fits(spec)
    return partial(params_model, spec, kind, extra, base)


def params_model(spec: PmlClass, kind: str, extra: dict[str, tuple[Any, Any]] | None = None,
                 base: type[Params] = PmlParams) -> type[Params]:
    """The Params model of a registered PML component: its arguments plus its nested tables.

    Args:
        spec: The catalogue entry.
        kind: Singular kind, for the model's name and docstring (``"loss"``).
        extra: Further fields (replacing generated ones of the same name).
        base: The model's base class.
    """
    pml = pml_arguments(spec)
    fields: dict[str, Any] = {arg.name: arg_field(arg, pml.get(arg.stands_for or arg.name), spec)
                              for arg in spec.args}
    fields.update(nested_fields(spec, pml))
    fields.update(extra or {})
    doc = f"Parameters of {kind} {spec.name!r} (pytorch-metric-learning {spec.cls})."
    return create_model(f"{camel(spec.name)}{camel(kind)}Params", __base__=base, __doc__=doc, **fields)
