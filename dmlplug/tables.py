"""Component tables: ``{name = "...", **params}`` naming a registered component (public API).

A recipe section (``[loss]``) and a table nested in a component's parameters (a wrapper's ``loss``, a PML
loss's ``distance``) are the same thing: a name of one component kind plus that component's parameters.
:func:`validate_table` is the one way such a table is validated, and :class:`ComponentTable` the one type
it becomes; :meth:`ComponentTable.build` (or :meth:`dmlplug.BuildContext.build`) the one way it is built.

A ``Params`` field holding a nested table is annotated ``Annotated[ComponentTable, TableOf("losses")]``, with
:func:`default_table` for its default::

    class WrapperParams(Params):
        loss: Annotated[ComponentTable, TableOf("losses")] = Field(default=default_table("contrastive"))

The table is validated against the registry that validates the recipe (handed down by the host as
pydantic validation context; without one it is an error, never another registry); ``dmlplug list`` shows
the field as a ``loss table`` and lists every component of the kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dmlplug.errors import ComponentError, DmlplugError

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import CoreSchema

    from dmlplug.context import BuildContext
    from dmlplug.params import Params
    from dmlplug.registry import ComponentInfo, Registry


@dataclass(frozen=True, eq=False)
class ComponentTable:
    """A validated component table: which registered component, with which validated parameters.

    Attributes:
        info: The registry entry (:class:`dmlplug.registry.ComponentInfo`: kind, name, plugin, tags …).
        params: The validated :class:`dmlplug.Params`.
    """

    info: ComponentInfo
    params: Params

    @property
    def kind(self) -> str:
        """Plural component kind (``"losses"``)."""
        return self.info.kind

    @property
    def name(self) -> str:
        """Canonical registered name (an alias in the recipe resolves to it)."""
        return self.info.name

    def build(self, ctx: BuildContext) -> Any:
        """Build the component (its kind's Protocol is checked, see :meth:`ComponentInfo.build`)."""
        return self.info.build(self.params, ctx)

    def to_dict(self, mode: str = "json") -> dict[str, Any]:
        """``{"name": ..., **params}`` with defaults filled in and unset (``None``) values left out."""
        return {"name": self.info.name, **drop_none(self.params.model_dump(mode=mode))}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ComponentTable):
            return NotImplemented
        mine, theirs = self.info, other.info
        same = (mine.kind, mine.name, mine.plugin) == (theirs.kind, theirs.name, theirs.plugin)
        return same and self.params == other.params

    def __hash__(self) -> int:
        return hash((self.info.kind, self.info.name))

    def __repr__(self) -> str:
        return f"ComponentTable({self.to_dict(mode='python')!r})"


@dataclass(frozen=True)
class TableOf:
    """Pydantic metadata: the annotated field is a :class:`ComponentTable` of ``kind``.

    ``Annotated[ComponentTable, TableOf("losses")]`` (singular or plural kind; add ``| None`` for an optional
    table, or put it in a ``list[...]``) is the field type of a nested table.
    """

    kind: str

    def __post_init__(self) -> None:
        from dmlplug.registry import normalize_kind

        object.__setattr__(self, "kind", normalize_kind(self.kind))

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        def validate(value: Any, info: core_schema.ValidationInfo) -> ComponentTable:
            context = info.context if isinstance(info.context, dict) else {}
            try:
                # Paths inside the nested table start at its field (`distance.q: unknown key`); pydantic puts
                # the outer path before the whole message.
                return validate_table(self.kind, value, where=info.field_name, registry=context.get("registry"))
            except DmlplugError as exc:
                # pydantic reports a ValueError at the field's path, like any other invalid value. The nested
                # table's fix rides along ("; fix: ..."): DmlplugError moves it out of the outer message, where
                # it replaces the outer component's more general fix.
                raise ValueError(f"{exc.what}; fix: {exc.fix}" if exc.fix else exc.what) from None

        def serialize(table: ComponentTable, info: core_schema.SerializationInfo) -> dict[str, Any]:
            return table.to_dict(mode=info.mode)

        return core_schema.with_info_plain_validator_function(
            validate, serialization=core_schema.plain_serializer_function_ser_schema(serialize, info_arg=True))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        from dmlplug.registry import singular

        return {"type": "object", "required": ["name"], "description": f"A {singular(self.kind)} table."}


def default_table(name: str, **params: Any) -> Any:
    """The default of a nested-table field: the raw ``{"name": name, **params}`` table.

    pydantic validates it into a :class:`ComponentTable` whenever the model is instantiated, against the
    registry of the recipe (``validate_default``), and copies it for each instance. It is typed ``Any`` so that
    the field keeps its true type::

        loss: Annotated[ComponentTable, TableOf("losses")] = Field(default=default_table("contrastive"))
    """
    return {"name": name, **params}


def validate_table(kind: str, table: ComponentTable | Mapping[str, Any], *, where: str | None = None,
                   registry: Registry | None) -> ComponentTable:
    """Validate ``{"name": ..., **params}`` as a component of ``kind``.

    Args:
        kind: Component kind, singular or plural.
        table: The raw table, or an already validated :class:`ComponentTable` (returned as it is).
        where: Recipe location for messages (default ``"<kind>[<name>]"``).
        registry: Where the name is looked up and nested tables validated: the recipe's, the command's or the
            context's. ``None`` (a model validated without ``context={"registry": ...}``) is an error, so that no
            table is ever resolved in another registry than the one the caller works with.

    Raises:
        ComponentError: The table is not a table, has no ``name``, names no registered component, or is a
            validated table of another kind.
        RecipeError: A parameter is invalid.
    """
    from dmlplug.registry import normalize_kind, singular

    kind = normalize_kind(kind)
    if isinstance(table, ComponentTable):
        if table.kind != kind:
            raise ComponentError(f"a {singular(table.kind)} table is given where a {singular(kind)} is expected",
                                 where=where or table.name)
        return table
    name = table.get("name") if isinstance(table, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ComponentError(f"a {singular(kind)} table needs a `name`", where=where or singular(kind),
                             fix='e.g. {name = "..."}' + f" (see `dmlplug list {kind}`)")
    if registry is None:
        raise ComponentError(f"the {singular(kind)} table {name!r} is validated without a registry",
                             where=where or f"{singular(kind)}[{name}]",
                             fix="validate the model with context={'registry': host.registry} (dmlplug.create and "
                                 "recipes do), or call validate_table(..., registry=host.registry)")
    info = registry.get(kind, name)
    rest = {k: v for k, v in table.items() if k != "name"}
    return ComponentTable(info, info.validate(rest, where=where or f"{singular(kind)}[{name}]", registry=registry))


def table_from_text(text: str, *, where: str, example: str) -> dict[str, Any]:
    """The raw table of a command-line component spec: ``"name"`` or ``"name:key=value,key=value"``.

    Each value is read as by :func:`dmlplug.read_value` (TOML, else the bare text), so ``aqe:n=3,alpha=2`` gives
    ``{"name": "aqe", "n": 3, "alpha": 2}``; :func:`validate_table` then checks it like a recipe's table. A value
    cannot hold a comma (a TOML list belongs in a recipe).

    Args:
        text: The spec.
        where: The option, for messages (``"--rerank"``).
        example: A valid spec, for the fix.

    Raises:
        ComponentError: An item is not ``key=value``, or the name is missing.
    """
    from dmlplug.recipe.overrides import read_value

    name, _, rest = text.strip().partition(":")
    table: dict[str, Any] = {"name": name.strip()}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ComponentError(f"{text!r}: {item!r} is not key=value", where=where, fix=f"write it as {example}")
        table[key.strip()] = read_value(value)
    if not table["name"]:
        raise ComponentError(f"{text!r} names no component", where=where, fix=f"write it as {example}")
    return table


def table_kind(annotation: Any) -> str | None:
    """The kind of a ``TableOf(kind)`` table type found in ``annotation`` (through ``X | None``, lists …)."""
    import typing

    for meta in getattr(annotation, "__metadata__", ()):
        if isinstance(meta, TableOf):
            return meta.kind
    for arg in typing.get_args(annotation):
        found = table_kind(arg)
        if found is not None:
            return found
    return None


def drop_none(value: Any) -> Any:
    """``value`` without ``None`` at any depth, as TOML writes it (TOML has no null).

    An unset key is left out; a ``None`` in a list becomes ``{}`` (the empty table recipes use for "none", e.g.
    a wrapper's ``miners = [{}, {name = ...}]``), so the other items keep their positions.
    """
    if isinstance(value, dict):
        return {k: drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [{} if v is None else drop_none(v) for v in value]
    return value
