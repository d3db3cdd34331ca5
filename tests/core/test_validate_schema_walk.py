"""A generated test: every recipe key and every parameter of the shipped recipes' components rejects a wrong value.

The keys are enumerated from the pydantic models (the sections of :mod:`dmlplug.recipe.schema`, the ``Params`` of
each component the recipes in ``recipes/`` name, resolved in the registry), so a new key is covered without
editing this file. For each key the test derives wrong values from its annotation: a value of a TOML type the
key does not take, a value just outside each bound, an unknown name where the key is an enum (``Literal``), a
component table or a string. ``dmlplug.validate`` must reject each one with a message that names the key.

A string key that legitimately takes any text (a run name, a path) is listed in :data:`FREE_STRINGS` with the
reason; the list itself is checked, so an entry for a key that no longer exists fails.
"""

from __future__ import annotations

import copy
import math
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Literal

import annotated_types
import pytest
from pydantic import BaseModel

import dmlplug
from dmlplug.errors import DmlplugError
from dmlplug.recipe.schema import ENGINE_OPTIONS, SECTION_KIND, Recipe
from dmlplug.tables import ComponentTable, table_kind

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "recipes").glob("*.toml"))
QUICKSTART = ROOT / "recipes" / "quickstart.toml"
UNKNOWN = "zzz-no-such-name"

#: String keys that take any text: ``(owner, key)`` where owner is a schema section (``"run"``) or a component
#: (``"datasets/cub200"``). Each says why no validate-time check is possible.
FREE_STRINGS: dict[tuple[str, str], str] = {
    ("run", "name"): "any run name; it only names the run directory",
    ("run", "output_dir"): "a folder the run creates; it need not exist before the run",
    ("data", "train_classes"): "class names of the dataset, known only once its files are read",
    ("data", "test_classes"): "class names of the dataset, known only once its files are read",
    ("data", "val_classes"): "class names of the dataset, known only once its files are read",
    ("datasets/cars196", "root"): "a data folder; whether it holds the dataset is checked when it is read",
    ("datasets/cub200", "root"): "a data folder; whether it holds the dataset is checked when it is read",
    ("datasets/sop", "root"): "a data folder; whether it holds the dataset is checked when it is read",
    ("datasets/glyphs", "cache_dir"): "a cache folder the dataset creates",
    ("backbones/timm", "pretrained"): "a local weights file (or true/false); the file is read when the model is built",
    ("loggers/tensorboard", "subdir"): "a sub-folder of the run directory the logger creates",
}


# ------------------------------------------------------------------------------------------------ annotations


def _kinds(annotation: Any) -> set[str]:
    """The TOML value kinds a field annotation accepts: str, enum, int, float, bool, list, table, any."""
    if annotation is Any:
        return {"any"}
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _kinds(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_kinds(arg) for arg in typing.get_args(annotation)))
    if origin is Literal:
        return {"enum"}
    if annotation is type(None):
        return set()
    if annotation is bool:
        return {"bool"}
    if annotation is int:
        return {"int"}
    if annotation is float:
        return {"int", "float"}
    if annotation is str or annotation is Path:
        return {"str"}
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple, set, frozenset):
        return {"list"}
    if origin is dict or annotation is dict or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return {"table"}
    if annotation is ComponentTable:  # a nested component table, {name = "...", ...}
        return {"table"}
    raise AssertionError(f"the schema walk does not know the annotation {annotation!r}: teach _kinds about it")


def _item_kinds(annotation: Any) -> set[str]:
    """The kinds a list field's items accept (empty for other fields)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _item_kinds(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_item_kinds(arg) for arg in typing.get_args(annotation)))
    if origin is list:
        return _kinds(typing.get_args(annotation)[0])
    return set()


def _wrong_type(kinds: set[str]) -> Any:
    """A TOML value of a kind the field does not take, or None when it takes every kind."""
    if "any" in kinds:
        return None
    for value, kind in (("zzz-not-a-valid-value", {"str", "enum"}), ({"zzz_bogus": 1}, {"table"}),
                        ([["zzz"]], {"list"}), (1.5, {"int", "float"})):
        if not kinds & kind:
            return value
    return None


def _out_of_range(field: Any, current: Any) -> list[tuple[str, Any]]:
    """Values just outside each bound in the field's metadata."""
    out: list[tuple[str, Any]] = []
    for bound in field.metadata:
        if isinstance(bound, annotated_types.Ge):
            out.append((f"< {bound.ge}", bound.ge - 1))
        elif isinstance(bound, annotated_types.Gt):
            out.append((f"<= {bound.gt}", bound.gt))
        elif isinstance(bound, annotated_types.Le):
            out.append((f"> {bound.le}", bound.le + 1))
        elif isinstance(bound, annotated_types.Lt):
            out.append((f">= {bound.lt}", bound.lt))
        elif isinstance(bound, annotated_types.MinLen) and bound.min_length > 0:
            base = current if isinstance(current, (str, list)) else ""
            out.append((f"shorter than {bound.min_length}", base[: bound.min_length - 1]))
        elif isinstance(bound, annotated_types.MaxLen) and isinstance(current, (str, list)) and current:
            out.append((f"longer than {bound.max_length}", current * (bound.max_length + 1)))
    # An int field with a float bound (ge=0.5) gets an int outside it; a bound at infinity has no outside.
    return [(label, v) for label, v in out if not (isinstance(v, float) and math.isinf(v))]


# ------------------------------------------------------------------------------------------------ cases


def _set(raw: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    node: Any = raw
    for part in path[:-1]:
        node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
    node[path[-1]] = value


def _get(raw: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        try:
            raw = raw[part]
        except (KeyError, IndexError, TypeError):
            return None
    return raw


def _cases_for_model(model: type[BaseModel], owner: str, recipe: Path, raw: dict[str, Any],
                     prefix: tuple[Any, ...]) -> list[tuple[str, Path, tuple[Any, ...], Any]]:
    """Wrong values for every field of ``model`` set at ``prefix`` of ``recipe``."""
    cases = []
    for key, field in model.model_fields.items():
        path = (*prefix, key)
        kinds = _kinds(field.annotation)
        current = _get(raw, path)
        if current is None and not field.is_required():
            current = field.get_default(call_default_factory=True)
        ident = f"{owner}.{key}"
        wrong = _wrong_type(kinds)
        if wrong is not None:
            cases.append((f"{ident}:type", recipe, path, wrong))
        for label, value in _out_of_range(field, current):
            cases.append((f"{ident}:{label}", recipe, path, value))
        if "enum" in kinds or ("str" in kinds and (owner, key) not in FREE_STRINGS):
            cases.append((f"{ident}:unknown", recipe, path, UNKNOWN))
        if table_kind(field.rebuild_annotation()) and typing.get_origin(field.annotation) not in (list, dict):
            cases.append((f"{ident}:unknown name", recipe, path, {"name": UNKNOWN}))
        items = _item_kinds(field.annotation)
        if "enum" in items or ("str" in items and (owner, key) not in FREE_STRINGS):
            cases.append((f"{ident}:unknown item", recipe, path, [UNKNOWN]))
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and owner == "recipe":
            cases += _cases_for_model(annotation, key, recipe, raw, path)
        if typing.get_origin(annotation) is dict:
            value_type = typing.get_args(annotation)[1]
            if isinstance(value_type, type) and issubclass(value_type, BaseModel):
                # [optimizer.groups.<name>]: the group every recipe has.
                cases += _cases_for_model(value_type, f"{owner}.{key}.backbone", recipe, raw, (*path, "backbone"))
    return cases


def _schema_cases() -> list[tuple[str, Path, tuple[Any, ...], Any]]:
    raw = tomllib.loads(QUICKSTART.read_text())
    cases = []
    for key, field in Recipe.model_fields.items():
        path = (key,)
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            cases.append((f"{key}:type", QUICKSTART, path, "zzz-not-a-valid-value"))
            cases += _cases_for_model(annotation, key, QUICKSTART, raw, path)
            continue
        cases.append((f"{key}:type", QUICKSTART, path, "zzz-not-a-valid-value"))
        if key in SECTION_KIND:
            cases.append((f"{key}:unknown", QUICKSTART, path, {"name": UNKNOWN}))
        elif typing.get_origin(annotation) is list:
            cases.append((f"{key}:unknown", QUICKSTART, path, [{"name": UNKNOWN}]))
    for section in ("data.dataset", "data.sampler"):
        cases.append((f"{section}:unknown", QUICKSTART, tuple(section.split(".")), {"name": UNKNOWN}))
    return cases


def _shipped_components() -> dict[str, tuple[Path, tuple[Any, ...], Any]]:
    """``kind/name`` -> (first shipped recipe naming it, its path in the recipe, its ComponentSpec)."""
    found: dict[str, tuple[Path, tuple[Any, ...], Any]] = {}
    for recipe in RECIPES:
        validated = dmlplug.validate(recipe)
        for spec_path, spec in validated.components.items():
            section = spec_path.split("[")[0]
            kind = SECTION_KIND[section]
            path: tuple[Any, ...] = tuple(section.split("."))
            if "[" in spec_path:
                path = (*path, int(spec_path.split("[")[1].rstrip("]")))
            found.setdefault(f"{kind}/{spec.name}", (recipe, path, spec))
    return found


def _component_cases() -> list[tuple[str, Path, tuple[Any, ...], Any]]:
    cases = []
    for owner, (recipe, path, spec) in sorted(_shipped_components().items()):
        raw = tomllib.loads(recipe.read_text())
        cases += _cases_for_model(type(spec.params), owner, recipe, raw, path)
        if path[0] in ENGINE_OPTIONS:  # the engine's keys of the table ([loss] weight …)
            cases += _cases_for_model(ENGINE_OPTIONS[path[0]], f"{owner}[engine]", recipe, raw, path)
    return cases


@pytest.fixture(autouse=True)
def _data_root(monkeypatch, tmp_path):
    # The shipped recipes read ${DMLPLUG_DATA}; validate never looks inside the folder.
    monkeypatch.setenv("DMLPLUG_DATA", str(tmp_path))


def _located(path: tuple[Any, ...]) -> list[str]:
    """The spellings of a key path an error may use: ``loss.margin``, ``[loss] margin``, ``evaluators[0].k``."""
    dotted = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in path).replace(".[", "[")
    forms = [dotted, ".".join(str(p) for p in path)]
    if len(path) > 1:
        head = ".".join(str(p) for p in path[:-1] if not isinstance(p, int))
        forms.append(f"[{head}] {path[-1]}")
        forms.append(f"[{dotted}]")
    return forms


def _check(recipe: Path, path: tuple[Any, ...], value: Any) -> None:
    raw = tomllib.loads(recipe.read_text())
    if path[0] not in raw and isinstance(path[1:2] and path[1], int):
        # A list section the recipe leaves at its default ([[loggers]]): write the default out first.
        raw[path[0]] = copy.deepcopy(Recipe.model_fields[path[0]].get_default(call_default_factory=True))
    _set(raw, path, value)
    with pytest.raises(DmlplugError) as info:
        dmlplug.validate(raw)
    text = str(info.value)
    assert any(form in text for form in _located(path)), f"the error does not name {_located(path)[0]}:\n{text}"


SCHEMA_CASES = _schema_cases()


@pytest.mark.parametrize(("recipe", "path", "value"), [c[1:] for c in SCHEMA_CASES], ids=[c[0] for c in SCHEMA_CASES])
def test_every_recipe_key_rejects_a_wrong_value(recipe, path, value):
    _check(recipe, path, value)


def test_component_parameters_of_the_shipped_recipes_reject_wrong_values(monkeypatch, tmp_path):
    """One test over all components: their cases are known only once the plugins are loaded."""
    monkeypatch.setenv("DMLPLUG_DATA", str(tmp_path))
    cases = _component_cases()
    assert len({c[0].split(".")[0] for c in cases}) >= 20, "the shipped recipes name fewer components than expected"
    failures = []
    for ident, recipe, path, value in cases:
        try:
            _check(recipe, path, value)
        except BaseException as exc:  # pytest.fail in _check raises a BaseException subclass
            failures.append(f"{ident} = {value!r} ({recipe.name}): {str(exc).splitlines()[0]}")
    assert not failures, "keys that accept a wrong value or do not name themselves:\n" + "\n".join(failures)


def test_the_free_string_allow_list_names_existing_string_keys():
    sections = {key: field.annotation for key, field in Recipe.model_fields.items()
                if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)}
    components = {owner: type(spec.params) for owner, (_, _, spec) in _shipped_components().items()}
    for owner, key in FREE_STRINGS:
        model = sections.get(owner) or components.get(owner)
        assert model is not None, f"FREE_STRINGS names {owner!r}, which no shipped recipe uses any more"
        assert key in model.model_fields, f"FREE_STRINGS names {owner}.{key}, which no longer exists"
        annotation = model.model_fields[key].annotation
        assert "str" in _kinds(annotation) | _item_kinds(annotation), f"{owner}.{key} no longer takes strings"
