"""Changes to a raw recipe before validation: ``--set`` overrides and ``${VAR}`` interpolation.

Both work on the parsed TOML dict, so an override or a variable can fill in any key, including the
parameters of a component, before anything is validated.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from dmlplug.errors import RecipeError

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate(value: Any, environ: Any, where: str, path: str = "") -> Any:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in every string of ``value`` (a copy is returned).

    An empty variable counts as unset, so ``DMLPLUG_DATA=`` falls back to the default.

    Args:
        value: The raw recipe, or a part of it.
        environ: Variable lookup (usually ``os.environ``).
        where: Recipe source for error messages.
        path: Key path of ``value`` inside the recipe, for error messages.

    Raises:
        RecipeError: A variable without default is unset.
    """
    if isinstance(value, dict):
        return {k: interpolate(v, environ, where, f"{path}.{k}" if path else k) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, environ, where, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in environ and environ[name] != "":
                return environ[name]
            if default is not None:
                return default
            raise RecipeError(
                f"environment variable {name} is not set (used in {path})",
                where=where,
                fix=f"export {name}=/path/to/... or write ${{{name}:-default}} in the recipe",
            )

        return _VAR.sub(substitute, value)
    return value


def apply_overrides(raw: dict[str, Any], overrides: list[str] | dict[str, Any] | None) -> None:
    """Set every override in ``raw`` in place, creating missing tables on the way.

    Args:
        raw: The parsed recipe.
        overrides: ``"a.b=value"`` strings (value parsed as TOML, else taken as a string) or a dict.

    Raises:
        RecipeError: An override is malformed or indexes a list entry that does not exist.
    """
    for parts, value, key in _parse_overrides(overrides):
        _apply_override(raw, parts, value, key)


def override_pairs(overrides: list[str] | dict[str, Any] | None) -> dict[str, Any]:
    """Normalise ``--set`` strings or a dict into an ordered ``{key: value}`` dict (later keys win)."""
    if not overrides:
        return {}
    if isinstance(overrides, dict):
        return dict(overrides)
    return dict(_split_override(o) for o in overrides)


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``value`` at an existing recipe path such as ``"data.dataset"`` or ``"regularizers[0]"``."""
    parts = _parse_key(path)
    node: Any = data
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value


def _parse_overrides(overrides: list[str] | dict[str, Any] | None) -> list[tuple[list[str | int], Any, str]]:
    if not overrides:
        return []
    items = overrides.items() if isinstance(overrides, dict) else [_split_override(o) for o in overrides]
    parsed = []
    for key, value in items:
        parsed.append((_parse_key(key), value, key))
    return parsed


def _split_override(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise RecipeError(f"override {text!r} is not of the form section.key=value",
                          fix='e.g. --set run.epochs=3 or --set loss.margin=0.1')
    key, raw_value = text.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw_value}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw_value  # bare strings need no quotes on the command line
    return key.strip(), value


def _parse_key(key: str) -> list[str | int]:
    parts: list[str | int] = []
    for token in re.split(r"\.(?![^\[]*\])", key.replace("[", ".[")):
        if not token:
            continue
        match = re.fullmatch(r"\[(\d+)\]", token)
        if match:
            parts.append(int(match.group(1)))
        elif token.isdigit():
            parts.append(int(token))
        else:
            parts.append(token)
    if not parts:
        raise RecipeError(f"empty override key {key!r}")
    return parts


def _apply_override(raw: dict[str, Any], parts: list[str | int], value: Any, key: str) -> None:
    node: Any = raw
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                raise RecipeError(f"override {key!r}: index {part} does not exist",
                                  fix="list sections are indexed from 0, e.g. regularizers.0.weight=2")
            node = node[part]
        else:
            if not isinstance(node, dict):
                raise RecipeError(f"override {key!r}: {part!r} is not inside a table")
            if part not in node:
                node[part] = [] if isinstance(nxt, int) else {}
            node = node[part]
    last = parts[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise RecipeError(f"override {key!r}: index {last} does not exist")
        node[last] = value
    elif not isinstance(node, dict):
        raise RecipeError(f"override {key!r}: cannot set a key inside a non-table value")
    else:
        node[last] = value
