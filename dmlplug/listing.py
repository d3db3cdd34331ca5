"""What ``dmlplug list`` shows: registry kinds, nested kinds (distances, reducers), parameters and types.

Two sorts of things can be named in a recipe. Registry kinds (``losses``, ``miners`` ...) have their own
tables (``[loss] name = ...``). Nested kinds (``distances``, ``reducers``) are named inside a component's
table (``[loss.distance] name = "cosine_similarity"``); no registry table holds them, so they are found where
a recipe meets them: in the parameters of registered components, as fields marked
``json_schema_extra={"nested": "distance"}`` whose type is a union of Params models with a literal ``name``.
"""

from __future__ import annotations

import fnmatch
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic.fields import FieldInfo

from dmlplug.errors import ComponentError, did_you_mean
from dmlplug.params import Params
from dmlplug.registry import KINDS, ComponentInfo, Registry, normalize_kind

#: Nested kinds (plural, as ``dmlplug list`` takes them) -> the ``nested`` mark of the fields that hold them.
NESTED_KINDS: dict[str, str] = {"distances": "distance", "reducers": "reducer"}
_NESTED_SINGULAR = {mark: kind for kind, mark in NESTED_KINDS.items()}

#: Every kind ``dmlplug list`` knows, in the order it lists them.
LIST_KINDS: tuple[str, ...] = (*KINDS, *NESTED_KINDS)


@dataclass(frozen=True)
class NestedInfo:
    """One name usable in a nested table (a PML distance or reducer).

    Attributes:
        kind: Plural nested kind (``"distances"``).
        name: Canonical name.
        aliases: Other accepted names.
        params: The Params model of the table (its ``name`` field included).
        description: The model's own docstring, if it has one.
        plugin: Plugin of the components that accept the table.
        used_by: ``"<kind>.<component>.<field>"`` of every registered component field that accepts it.
    """

    kind: str
    name: str
    aliases: tuple[str, ...]
    params: type[Params]
    description: str
    plugin: str
    used_by: tuple[str, ...]


def is_pattern(text: str) -> bool:
    """Whether ``text`` is a shell-style wildcard (``*``, ``?`` or ``[...]``), as timm's ``list_models`` takes."""
    return any(ch in text for ch in "*?[")


def matches(pattern: str | None, names: Iterable[str]) -> bool:
    """Whether any of ``names`` matches ``pattern`` (fnmatch, case-insensitive); no pattern matches all."""
    return pattern is None or any(fnmatch.fnmatch(n.lower(), pattern.lower()) for n in names)


def _params_models(annotation: Any) -> Iterator[type[Params]]:
    """The Params models inside a field type (through ``X | None``, unions and ``Annotated``)."""
    if isinstance(annotation, type) and issubclass(annotation, Params):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        if not isinstance(arg, FieldInfo):
            yield from _params_models(arg)


def _literal_names(model: type[Params]) -> tuple[str, ...]:
    field = model.model_fields.get("name")
    if field is None or typing.get_origin(field.annotation) is not typing.Literal:
        return ()
    return tuple(str(v) for v in typing.get_args(field.annotation))


def nested_infos(registry: Registry, kind: str) -> list[NestedInfo]:
    """Every name of nested ``kind`` that some registered component accepts, sorted by name.

    Args:
        registry: The registry whose components are searched.
        kind: A key of :data:`NESTED_KINDS` (``"distances"`` or ``"reducers"``).
    """
    mark = NESTED_KINDS[kind]
    found: dict[str, tuple[type[Params], str, list[str]]] = {}
    for outer in KINDS:
        for info in registry.infos(outer):
            for field_name, spec in info.params.model_fields.items():
                extra = spec.json_schema_extra
                if not isinstance(extra, dict) or extra.get("nested") != mark:
                    continue
                for model in _params_models(spec.annotation):
                    names = _literal_names(model)
                    if names:
                        entry = found.setdefault(names[0], (model, info.plugin, []))
                        entry[2].append(f"{outer}.{info.name}.{field_name}")
    infos = []
    for name in sorted(found):
        model, plugin, used_by = found[name]
        doc = model.__dict__.get("__doc__") or ""
        infos.append(NestedInfo(kind=kind, name=name, aliases=_literal_names(model)[1:], params=model,
                                description=doc.strip().splitlines()[0] if doc.strip() else "",
                                plugin=plugin, used_by=tuple(used_by)))
    return infos


def type_name(annotation: Any, field: FieldInfo | None = None) -> str:
    """A short, readable name of a parameter type: ``float``, ``int | None``, ``'avg' | 'max'``, ``distance table``.

    Args:
        annotation: The field's type.
        field: The field, whose ``nested`` mark names a nested table's kind.
    """
    extra = field.json_schema_extra if field is not None else None
    if isinstance(extra, dict) and isinstance(extra.get("nested"), str):
        optional = type(None) in typing.get_args(annotation)
        return f"{extra['nested']} table" + (" | None" if optional else "")
    if annotation is type(None) or annotation is None:
        return "None"
    if isinstance(annotation, type) and issubclass(annotation, Params):
        return "table"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
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
    """One line per parameter: ``name = default  (type, bounds)  -- description``.

    A nested table's ``name`` is what the entry is listed under, not a parameter, and is left out.
    """
    lines = []
    for field_name, spec in model.model_fields.items():
        if field_name == "name" and _literal_names(model):
            continue
        default = "required" if spec.is_required() else repr(spec.get_default(call_default_factory=True))
        kind = ", ".join([type_name(spec.annotation, spec), *bounds(spec)])
        lines.append(f"{indent}{field_name} = {default}  ({kind})  -- {spec.description or ''}".rstrip())
    return lines


def summary_line(info: ComponentInfo | NestedInfo) -> str:
    """The one-line entry of a component in ``dmlplug list``."""
    tags = f" [{', '.join(sorted(info.tags))}]" if getattr(info, "tags", None) else ""
    return f"  {info.name:<34} ({info.plugin}) {info.description}{tags}".rstrip()


def detail_lines(info: ComponentInfo | NestedInfo) -> list[str]:
    """Everything about one component: description, aliases, tags, requires, plugin and every parameter."""
    lines = [f"{info.kind}.{info.name}", f"  description: {info.description or '-'}",
             f"  plugin:      {info.plugin or '-'}"]
    if info.aliases:
        lines.append(f"  aliases:     {', '.join(info.aliases)}")
    if isinstance(info, NestedInfo):
        singular = NESTED_KINDS[info.kind]
        lines.append(f"  used as:     a `{singular} = {{name = \"{info.name}\", ...}}` table of {len(info.used_by)} "
                     f"component parameters, e.g. {', '.join(info.used_by[:3])}")
    else:
        lines.append(f"  tags:        {', '.join(sorted(info.tags)) or '-'}")
        lines.append(f"  requires:    {', '.join(sorted(info.requires)) or '-'}")
    shown = param_lines(info.params, indent="    ")
    lines.append("  parameters:" + ("" if shown else " none"))
    lines.extend(shown)
    return lines


def list_kind(kind: str) -> str:
    """The plural kind ``dmlplug list`` takes for ``kind`` (``"loss"``, ``"distance"`` ... are accepted).

    Raises:
        ComponentError: ``kind`` names nothing ``dmlplug list`` can show.
    """
    if kind in NESTED_KINDS:
        return kind
    if kind in _NESTED_SINGULAR:
        return _NESTED_SINGULAR[kind]
    try:
        return normalize_kind(kind)
    except ComponentError:
        singulars = [k[:-1] for k in LIST_KINDS] + ["loss"]
        raise ComponentError(f"unknown component kind {kind!r}{did_you_mean(kind, [*LIST_KINDS, *singulars])}",
                             where="dmlplug list KIND",
                             fix="kinds are: " + ", ".join(LIST_KINDS) + "; or give a wildcard such as '*proxy*'",
                             ) from None


def entries(registry: Registry, kind: str) -> list[ComponentInfo | NestedInfo]:
    """The components of one listable kind, sorted by name."""
    return list(nested_infos(registry, kind)) if kind in NESTED_KINDS else list(registry.infos(kind))


def find(registry: Registry, kind: str, name: str) -> ComponentInfo | NestedInfo:
    """One component of a listable kind, by name or alias.

    Raises:
        ComponentError: No such component; the message suggests close names.
    """
    if kind not in NESTED_KINDS:
        return registry.get(kind, name)
    infos = nested_infos(registry, kind)
    for info in infos:
        if name == info.name or name in info.aliases:
            return info
    known = [n for info in infos for n in (info.name, *info.aliases)]
    raise ComponentError(f"unknown {NESTED_KINDS[kind]} {name!r}{did_you_mean(name, known)}",
                         fix=f"run `dmlplug list {kind}` to see every {NESTED_KINDS[kind]} a recipe can name")
