"""Labels of ``dmlplug report`` groups: the recipe values that tell runs of one name apart, and only those.

Two groups of one run name are told apart by the recipe keys whose values differ, leaving out differences a
reader comparing the runs does not need:

* a parameter of a component table whose value follows from the component's name (``loss.margin`` when one
  group trains ``arcface`` and the other ``multi_similarity``): ``loss.name`` already says it;
* a key only some recipes hold, where the others would hold its current default anyway (a key added to dmlplug
  after some of the runs, such as ``evaluation.select_on = "auto"``), or a key this dmlplug no longer has.

A key left out comes back when, without it, two labels would read the same. A key set in one recipe and unset
in another (``run.grad_clip``) shows ``none`` for the unset one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dmlplug.registry import Registry

#: How an unset value (a key absent from a resolved recipe: ``None`` is not written to TOML) is shown.
UNSET = "none"


def differing_keys(flats: Sequence[dict[str, Any]]) -> list[str]:
    """Every key whose value differs between the flattened recipes (absent counts as unset)."""
    keys = {k for flat in flats for k in flat}
    return sorted(k for k in keys if len({_canon(flat.get(k)) for flat in flats}) > 1)


def label_keys(flats: Sequence[dict[str, Any]], registry: Registry) -> list[list[str]]:
    """The keys to show in the label of each group with these flattened recipes (see the module docstring).

    Every label shows the keys that meaningfully differ; groups whose labels would still read the same also show
    the left-out keys that tell them apart (only they: the other labels stay short). ``registry`` gives the
    defaults of the components' keys.
    """
    keys = differing_keys(flats)
    shown = [k for k in keys if not _follows_from_name(k, flats) and not _unset_means_default(k, flats, registry)]
    per_group = [list(shown) for _ in flats]
    for same in _collisions(flats, shown):
        extra = [k for k in differing_keys([flats[i] for i in same]) if k not in shown]
        for i in same:
            per_group[i] = sorted(shown + extra)
    return per_group


def shown_value(value: Any) -> str:
    """A recipe value in a label: as TOML would show it, strings bare (``split_id=2``, ``name=arcface``)."""
    if value is None:
        return UNSET
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str) if isinstance(value, list | dict | bool) else str(value)


def _canon(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True)


def _collisions(flats: Sequence[dict[str, Any]], keys: list[str]) -> list[list[int]]:
    """Indices of the recipes whose values of ``keys`` are the same, per set of two or more."""
    by_label: dict[tuple[str, ...], list[int]] = {}
    for i, flat in enumerate(flats):
        by_label.setdefault(tuple(_canon(flat.get(k)) for k in keys), []).append(i)
    return [same for same in by_label.values() if len(same) > 1]


def _table_of(key: str, flats: Sequence[dict[str, Any]]) -> str | None:
    """The component table holding ``key`` (the longest prefix with a ``name`` in some recipe), or ``None``."""
    parts = key.split(".")
    for end in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:end])
        if any(f"{prefix}.name" in flat for flat in flats):
            return prefix
    return None


def _engine_option(table: str, key: str) -> bool:
    """Whether ``key`` of component table ``table`` belongs to the engine (``[loss] weight``), not the component."""
    from dmlplug.recipe.schema import ENGINE_OPTIONS

    options = ENGINE_OPTIONS.get(re.sub(r"\[\d+\]$", "", table))
    return options is not None and key[len(table) + 1:].split(".")[0] in options.model_fields


def _follows_from_name(key: str, flats: Sequence[dict[str, Any]]) -> bool:
    """A component parameter whose value is the same wherever the component's name is."""
    table = _table_of(key, flats)
    if table is None or key == f"{table}.name" or _engine_option(table, key):
        return False
    by_name: dict[str, set[str]] = {}
    for flat in flats:
        by_name.setdefault(_canon(flat.get(f"{table}.name")), set()).add(_canon(flat.get(key)))
    return all(len(values) == 1 for values in by_name.values())


def _unset_means_default(key: str, flats: Sequence[dict[str, Any]], registry: Registry) -> bool:
    """Set to one value in some recipes, absent from the others, and that value is the key's default.

    Or the key is no longer known. Either is a difference of dmlplug versions, not of experiments.
    """
    present = {_canon(flat[key]) for flat in flats if key in flat}
    if len(present) != 1 or all(key in flat for flat in flats):
        return False
    flat = next(flat for flat in flats if key in flat)
    known, default = _default(key, flat, flats, registry)
    return not known or _canon(default) == _canon(flat[key])


def _default(key: str, flat: dict[str, Any], flats: Sequence[dict[str, Any]],
             registry: Registry) -> tuple[bool, Any]:
    """``(known, default)`` of a recipe key in this dmlplug: a section key, an engine option or a component's."""
    from dmlplug.recipe.schema import ENGINE_OPTIONS, SECTION_KIND, Recipe

    table = _table_of(key, flats)
    if table is None:
        return _model_default(Recipe, key.split("."))
    section, rest = re.sub(r"\[\d+\]$", "", table), key[len(table) + 1:].split(".")
    if _engine_option(table, key):
        return _model_default(ENGINE_OPTIONS[section], rest)
    kind, name = SECTION_KIND.get(section), flat.get(f"{table}.name")
    if kind is None or not isinstance(name, str):
        return False, None
    from dmlplug.errors import DmlplugError

    try:
        params = registry.get(kind, name).params
    except DmlplugError:  # a component this installation does not have
        return False, None
    return _model_default(params, rest) if params is not None else (False, None)


def _model_default(model: Any, path: list[str]) -> tuple[bool, Any]:
    """The default of the field at ``path`` in a pydantic model (nested models followed), if it has one."""
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    for i, part in enumerate(path):
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return False, None
        if i == len(path) - 1:
            default = field.get_default(call_default_factory=True)
            if default is PydanticUndefined:
                return False, None
            return True, default.model_dump() if isinstance(default, BaseModel) else default
        model = field.annotation
    return False, None
