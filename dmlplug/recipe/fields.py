"""The pydantic field a recipe key sets: its type and its own bounds (``dmlplug.recipe_field``).

A search space (``dmlplug tune``) or any tool that varies recipe keys asks, before anything runs, whether a
key exists and which values its field accepts. The key is written as a ``--set`` override
(``loss.margin``, ``regularizers[0].weight``, ``data.sampler.m``) and parsed by the same parser; the field
is found in the validated recipe: a component's ``Params`` (the component the recipe names at that path), the
engine keys of its table (``[loss] weight``), or a section model (``run.epochs``). Nested component tables are
followed (``data.dataset.dataset.num_classes`` of a wrapper dataset).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from dmlplug.errors import RecipeError, did_you_mean
from dmlplug.recipe.overrides import _parse_key
from dmlplug.tables import ComponentTable


@dataclass(frozen=True)
class RecipeField:
    """One recipe key's field.

    Attributes:
        key: The key as given (``"loss.margin"``).
        owner: What the field belongs to, for messages (``"losses 'multi_similarity'"``, ``"[run]"``).
        annotation: The field's type annotation.
        value: The value the validated recipe has for it (its default when the recipe does not set it).
        bounds: The field's own numeric bounds: any of ``ge``, ``gt``, ``le``, ``lt`` (from ``Field(ge=...)``).
        description: The field's description.
    """

    key: str
    owner: str
    annotation: Any
    value: Any
    bounds: dict[str, float] = field(default_factory=dict)
    description: str = ""


def recipe_field(validated: Any, key: str) -> RecipeField:
    """The field ``key`` sets in ``validated`` (a :func:`dmlplug.validate` result).

    Args:
        validated: A validated recipe.
        key: A recipe key as ``--set`` writes it.

    Returns:
        The field's :class:`RecipeField`.

    Raises:
        RecipeError: No such key in this recipe (with "did you mean"), or the key names a whole table.
    """
    parts = _parse_key(key, key)
    components = validated.components
    # The longest prefix that names a component table of the recipe ("data.sampler", "regularizers[0]").
    for cut in range(len(parts) - 1, 0, -1):
        path = _path(parts[:cut])
        if path in components:
            spec = components[path]
            return _in_table(key, spec.table, parts[cut:], spec.options)
    node: Any = validated.recipe
    for i, part in enumerate(parts):
        if not isinstance(node, BaseModel) or not isinstance(part, str):
            break
        fields = type(node).model_fields
        if part not in fields:
            raise _unknown(key, part, list(fields), f"[{_path(parts[:i])}]" if i else "the recipe")
        if i == len(parts) - 1:
            return _field(key, f"[{_path(parts[:i])}]", fields[part], getattr(node, part))
        node = getattr(node, part)
    raise RecipeError(f"{key} is not a single value of the recipe", where=key,
                      fix="name a parameter, e.g. loss.margin, optimizer.lr, regularizers[0].weight")


def _in_table(key: str, table: ComponentTable, rest: list[str | int], options: Any) -> RecipeField:
    owner = f"{table.kind} {table.name!r}"
    name = rest[0]
    if not isinstance(name, str):
        raise RecipeError(f"{key}: {owner} is not a list", where=key)
    params = table.params
    fields = type(params).model_fields
    option_fields = type(options).model_fields
    if name in fields:
        value = getattr(params, name)
        if len(rest) == 1:
            return _field(key, owner, fields[name], value)
        if isinstance(value, ComponentTable):
            return _in_table(key, value, rest[1:], _NoOptions())
    elif name in option_fields and len(rest) == 1:
        return _field(key, f"{owner} (engine key)", option_fields[name], getattr(options, name))
    elif name == "name" and len(rest) == 1:
        return RecipeField(key=key, owner=owner, annotation=str, value=table.name,
                           description=f"the registered {table.kind} name")
    else:
        raise _unknown(key, name, [*fields, *option_fields], owner)
    raise RecipeError(f"{key} is not a single value of the recipe", where=key,
                      fix="name one parameter of the table")


class _NoOptions(BaseModel):
    """A nested component table has no engine keys."""


def _field(key: str, owner: str, info: FieldInfo, value: Any) -> RecipeField:
    bounds: dict[str, float] = {}
    for meta in info.metadata:
        for name in ("ge", "gt", "le", "lt"):
            bound = getattr(meta, name, None)
            if isinstance(bound, (int, float)) and not isinstance(bound, bool):
                bounds[name] = float(bound)
    return RecipeField(key=key, owner=owner, annotation=info.annotation, value=value, bounds=bounds,
                       description=info.description or "")


def _unknown(key: str, name: str | int, known: list[str], owner: str) -> RecipeError:
    return RecipeError(f"{key}: {owner} has no key {name!r}{did_you_mean(str(name), known)}", where=key,
                       fix=f"its keys: {', '.join(known)}" if known else "check the recipe key")


def _path(parts: list[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(parts))
