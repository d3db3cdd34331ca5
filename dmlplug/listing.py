"""What ``dmlplug list`` shows: the registry's components of every kind, their parameters and types.

Every kind a recipe can name is a registry kind (:data:`dmlplug.registry.KINDS`), those named only inside another
component's table included: ``[loss.distance] name = "cosine_similarity"`` names a registered distance, so
``dmlplug list distances`` lists the registry's distances like any other kind. A parameter that holds such a
nested table (a ``Annotated[ComponentTable, TableOf(kind)]`` field) is shown as a ``distance table``.
"""

from __future__ import annotations

import fnmatch
import types
import typing
from collections.abc import Iterable
from typing import Any

from pydantic.fields import FieldInfo

from dmlplug.errors import ComponentError, did_you_mean
from dmlplug.params import Params
from dmlplug.protocols.kinds import KINDS
from dmlplug.registry import ComponentInfo, normalize_kind, singular
from dmlplug.tables import ComponentTable, table_kind


def is_pattern(text: str) -> bool:
    """Whether ``text`` is a shell-style wildcard (``*``, ``?`` or ``[...]``), as timm's ``list_models`` takes."""
    return any(ch in text for ch in "*?[")


def matches(pattern: str | None, names: Iterable[str]) -> bool:
    """Whether any of ``names`` matches ``pattern`` (fnmatch, case-insensitive); no pattern matches all."""
    return pattern is None or any(fnmatch.fnmatch(n.lower(), pattern.lower()) for n in names)


def type_name(annotation: Any) -> str:
    """A short, readable name of a parameter type: ``float``, ``int | None``, ``'avg' | 'max'``, ``distance table``.

    Give a field's ``rebuild_annotation()``: pydantic moves the metadata of a top-level ``Annotated`` (such as the
    kind of a ``Annotated[ComponentTable, TableOf(kind)]`` field, or bounds) from ``annotation`` into ``metadata``.
    """
    if annotation is type(None) or annotation is None:
        return "None"
    if isinstance(annotation, type) and issubclass(annotation, Params):
        return "table"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        kind = table_kind(annotation) if args[0] is ComponentTable else None
        return f"{singular(kind)} table" if kind else type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin is typing.Union or origin is types.UnionType:
        if args and all(isinstance(a, type) and issubclass(a, Params) for a in args if a is not type(None)):
            return "table" + (" | None" if type(None) in args else "")
        return " | ".join(dict.fromkeys(type_name(a) for a in args))
    if origin is not None:
        inner = ", ".join(type_name(a) for a in args if a is not Ellipsis)
        base = getattr(origin, "__name__", str(origin))
        return f"{base}[{inner}]" if inner else base
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def bounds(field: FieldInfo) -> list[str]:
    """The field's numeric and length constraints as ``">= 0"``, ``"< 1"``, ``"length >= 1"``."""
    out = []
    for item in field.metadata:
        for attr, symbol in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(item, attr, None)
            if value is not None:
                out.append(f"{symbol} {value}")
        for attr, symbol in (("min_length", ">="), ("max_length", "<=")):
            value = getattr(item, attr, None)
            if value is not None:
                out.append(f"length {symbol} {value}")
    return out


def param_lines(model: type[Params], indent: str = "      ") -> list[str]:
    """One line per parameter: ``name = default  (type, bounds)  -- description``."""
    lines = []
    for field_name, spec in model.model_fields.items():
        default = "required" if spec.is_required() else repr(spec.get_default(call_default_factory=True))
        kind = ", ".join([type_name(spec.rebuild_annotation()), *bounds(spec)])
        key = spec.alias or field_name  # what a recipe writes (``lambda`` for the field ``lam``)
        lines.append(f"{indent}{key} = {default}  ({kind})  -- {spec.description or ''}".rstrip())
    return lines


def summary_line(info: ComponentInfo) -> str:
    """The one-line entry of a component in ``dmlplug list``."""
    tags = f" [{', '.join(sorted(info.tags))}]" if info.tags else ""
    return f"  {info.name:<34} ({info.plugin}) {info.description}{tags}".rstrip()


def detail_lines(info: ComponentInfo) -> list[str]:
    """Everything about one component: description, aliases, tags, requires, plugin and every parameter."""
    lines = [f"{info.kind}.{info.name}", f"  description: {info.description or '-'}",
             f"  plugin:      {info.plugin or '-'}"]
    if info.aliases:
        lines.append(f"  aliases:     {', '.join(info.aliases)}")
    lines.append(f"  tags:        {', '.join(sorted(info.tags)) or '-'}")
    lines.append(f"  requires:    {', '.join(sorted(info.requires)) or '-'}")
    shown = param_lines(info.params, indent="    ")
    lines.append("  parameters:" + ("" if shown else " none"))
    lines.extend(shown)
    return lines


def list_kind(kind: str) -> str:
    """The plural kind ``dmlplug list`` takes for ``kind`` (``"loss"``, ``"distance"`` ... are accepted).

    Raises:
        ComponentError: ``kind`` is not a component kind.
    """
    try:
        return normalize_kind(kind)
    except ComponentError:
        raise ComponentError(f"unknown component kind {kind!r}{did_you_mean(kind, [*KINDS, *map(singular, KINDS)])}",
                             where="dmlplug list KIND",
                             fix="kinds are: " + ", ".join(KINDS) + "; or give a wildcard such as '*proxy*'",
                             ) from None
