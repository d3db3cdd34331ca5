"""Params models for the PML catalogue, and the nested-table types shared by losses and miners.

Everything here is torch-free: the models are generated from :mod:`dmlplug_builtins.pml.catalog` when
the plugin is loaded, and validate recipes before anything heavy is imported.

Nested tables:
    * ``distance`` / ``reducer`` / ``embedding_regularizer`` / ``weight_regularizer``: PML objects handed
      to a loss or miner constructor, e.g. ``[loss.distance] name = "cosine_similarity"``. They are a
      discriminated union on ``name`` (canonical name or alias), so a typo is reported with its path.
    * ``loss`` / ``miner`` tables of wrappers (``cross_batch_memory``, ``multiple_losses`` ...): any
      registered component, validated against the registry that validates the recipe (handed over in
      the pydantic validation context by ``ComponentInfo.validate(..., registry=...)``).
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, Field, ValidationInfo, create_model

from dmlplug.errors import DmlplugError
from dmlplug.params import Params
from dmlplug_builtins.pml.catalog import DISTANCES, REDUCERS, REGULARIZERS, Arg, PmlClass

#: Reducers that take other reducers; their inner reducers come from the remaining (simple) ones.
_COMPOSITE_REDUCERS = frozenset({"multiple", "per_anchor"})


def camel(name: str) -> str:
    """``"proxy_anchor"`` -> ``"ProxyAnchor"`` (model names shown in validation errors)."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def arg_field(arg: Arg) -> tuple[Any, Any]:
    """The ``(type, FieldInfo)`` pair of one catalogue argument."""
    return arg.type, Field(arg.default, description=arg.description)


def table_model(spec: PmlClass, kind: str, extra: dict[str, tuple[Any, Any]] | None = None) -> type[Params]:
    """A nested-table model: ``name`` (the canonical name or an alias) plus the spec's arguments."""
    names = (spec.name, *spec.aliases)
    fields: dict[str, Any] = {
        "name": (Literal[names], Field(description=f"{kind.capitalize()} name: {' / '.join(names)}.")),
    }
    fields.update({arg.name: arg_field(arg) for arg in spec.args})
    fields.update(extra or {})
    return create_model(f"{camel(spec.name)}{camel(kind)}Table", __base__=Params,
                        __doc__=getattr(spec, "description", None) or f"pytorch-metric-learning {spec.cls}.", **fields)


def _union(models: list[type[Params]]) -> Any:
    return Annotated[Union[tuple(models)], Field(discriminator="name")]  # noqa: UP007 - built at runtime


@cache
def distance_table() -> Any:
    """Type of a ``distance`` table."""
    return _union([table_model(spec, "distance") for spec in DISTANCES])


@cache
def simple_reducer_table() -> Any:
    """Type of a reducer table that holds no other reducer."""
    return _union([table_model(s, "reducer") for s in REDUCERS if s.name not in _COMPOSITE_REDUCERS])


@cache
def reducer_models() -> dict[str, type[Params]]:
    """Reducer table models by canonical name (composite reducers hold simple ones)."""
    inner = simple_reducer_table()
    extras = {
        "multiple": {
            "reducers": (dict[str, inner], Field(
                default_factory=dict, description="Reducer per sub-loss name (e.g. pos_loss, neg_loss).")),
            "default_reducer": (inner | None, Field(
                None, description="Reducer of sub-losses not listed in reducers (default: mean).")),
        },
        "per_anchor": {
            "reducer": (inner | None, Field(
                None, description="Reducer applied to the per-anchor means (default: mean).")),
        },
    }
    return {s.name: table_model(s, "reducer", extras.get(s.name)) for s in REDUCERS}


@cache
def reducer_table() -> Any:
    """Type of a ``reducer`` table."""
    return _union(list(reducer_models().values()))


@cache
def regularizer_table() -> Any:
    """Type of an ``embedding_regularizer`` / ``weight_regularizer`` table (a PML regulariser)."""
    return _union([table_model(spec, "regularizer") for spec in REGULARIZERS])


def nested_fields(spec: PmlClass) -> dict[str, tuple[Any, Any]]:
    """The base-class keyword arguments of ``spec`` as Params fields."""
    fields: dict[str, tuple[Any, Any]] = {}
    if "distance" in spec.nested:
        fields["distance"] = (distance_table() | None, Field(
            None, description='Distance table, e.g. {name = "cosine_similarity"}; default: the class default.',
            json_schema_extra={"nested": "distance"}))
    if "reducer" in spec.nested:
        fields["reducer"] = (reducer_table() | None, Field(
            None, description='Reducer table, e.g. {name = "mean"}; default: the class default.',
            json_schema_extra={"nested": "reducer"}))
    for which, target in (("embedding", "the embeddings"), ("weight", "the class weights")):
        if f"{which}_regularizer" in spec.nested:
            fields[f"{which}_regularizer"] = (regularizer_table() | None, Field(
                None, description=f'PML regulariser of {target}, e.g. {{name = "lp"}}; default: none.',
                json_schema_extra={"nested": "regularizer"}))
            fields[f"{which}_reg_weight"] = (float, Field(
                1.0, description=f"Weight of the {which} regulariser term."))
    return fields


class PmlParams(Params):
    """Parameters of an adapted pytorch-metric-learning class."""

    def optimizer_group_names(self, section: str) -> tuple[str, ...]:
        """A PML loss's parameters (ArcFace weights, proxies …), if it has any, form one group: ``section``."""
        return (section,)


def params_model(spec: PmlClass, kind: str, extra: dict[str, tuple[Any, Any]] | None = None) -> type[Params]:
    """The Params model of a registered PML component: its arguments plus its nested tables."""
    fields: dict[str, Any] = {arg.name: arg_field(arg) for arg in spec.args}
    fields.update(nested_fields(spec))
    fields.update(extra or {})
    doc = f"Parameters of {kind} {spec.name!r} (pytorch-metric-learning {spec.cls})."
    return create_model(f"{camel(spec.name)}{camel(kind)}Params", __base__=PmlParams, __doc__=doc, **fields)


def _check_component_table(kind: str) -> Any:
    """A validator of a ``{name = ..., **params}`` table against the registry in the validation context.

    The host validates recipes with ``context={"registry": registry}``, so a nested table may name a
    component of any installed plugin. Without a context (a bare ``Model.model_validate``) only the
    ``name`` key is checked: the registry the table will be built with is not known then.
    """

    def check(table: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if "name" not in table or not isinstance(table["name"], str):
            raise ValueError(f'a {kind} table needs a "name" key, e.g. {{name = "contrastive"}}')
        registry = info.context.get("registry") if isinstance(info.context, dict) else None
        if registry is None:
            return table
        rest = {k: v for k, v in table.items() if k != "name"}
        try:
            component = registry.get(kind, table["name"])
            component.validate(rest, where=f"{kind}[{table['name']}]", registry=registry)
        except DmlplugError as exc:
            raise ValueError(exc.what) from None
        return table

    return AfterValidator(check)


#: A nested loss table ``{name = "contrastive", pos_margin = 0.1}``, validated against the registry.
LossTable = Annotated[dict[str, Any], _check_component_table("losses")]
#: A nested miner table, validated against the registry.
MinerTable = Annotated[dict[str, Any], _check_component_table("miners")]
