"""Changes to a raw recipe before validation: ``--set`` overrides and ``${VAR}`` interpolation.

Both work on the parsed TOML dict, so an override or a variable can fill in any key, including the
parameters of a component, before anything is validated. An error about a key an override set names the
override as its ``where`` (:func:`blame_override`), not the recipe file the key is not in.
"""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

from dmlplug.errors import DmlplugError, RecipeError

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
#: A recipe path as messages write it: ``loss.margin``, ``regularizers[0].weight``, ``regularizers.0.weight``.
_PATH = r"[A-Za-z_][\w-]*(?:\.[\w-]+|\[\d+\])*"


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
                where=f"{where}: {path}" if path else where,
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
    for parts, value, label in _parse_overrides(overrides):
        _apply_override(raw, parts, value, label)


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


def override_label(key: str, value: Any) -> str:
    """How messages name an override: ``--set loss.margin=abc`` (a string value bare, as typed)."""
    return f"--set {key}={_shown(value, top=True)}"


def blame_override(exc: DmlplugError, overrides: list[str] | dict[str, Any] | None) -> None:
    """Name the overrides that set the recipe keys an error is about first in its ``where``, if any did.

    An override is to blame when the error names its key or a key inside the table it set (``--set
    loss={...}``), or when the error is about a whole table (nothing deeper named) that the override changed.
    ``where`` becomes the override, followed by the place the error named (``--set loss.margin=abc (loss)``,
    ``--set run.epochs=x (recipes/quickstart.toml)``); other errors keep their ``where``.

    Args:
        exc: An error raised while the overridden recipe was validated; changed in place.
        overrides: The overrides applied to the recipe, as given to :func:`apply_overrides`.
    """
    labels = {_dotted(parts): label for parts, _, label in _parse_overrides(overrides)}
    if not labels:
        return
    subjects = _subjects(exc)
    blamed = [label for key, label in labels.items() if any(s == key or _inside(s, key) for s in subjects)]
    if not blamed:
        tables = [s for s in subjects if not any(_inside(other, s) for other in subjects)]
        blamed = [label for key, label in labels.items() if any(_inside(key, table) for table in tables)]
    if blamed:
        exc.set_where(", ".join(blamed) + (f" ({exc.where})" if exc.where else ""))


def _subjects(exc: DmlplugError) -> set[str]:
    """The recipe paths an error is about: the path leading each line of its text, and the one of ``where``."""
    found = set()
    for line in exc.what.splitlines():
        match = re.match(rf"\s*({_PATH})[:\s]", line)
        if match:
            found.add(_normal(match.group(1)))
    place = (exc.where or "").rsplit(": ", 1)[-1]  # "<recipe file>: loss.name"
    for section, key in re.findall(r"\[([\w.\[\]-]+)\](?: (\w+))?", place):  # "[evaluation] metric"
        found.add(_normal(f"{section}.{key}" if key else section))
    match = re.match(rf"({_PATH})(?:\s|$)", place)
    if match:
        found.add(_normal(match.group(1)))
    return found


def _normal(path: str) -> str:
    """``regularizers.0.weight`` -> ``regularizers[0].weight``: list indices as the engine writes them."""
    return re.sub(r"\.(\d+)(?=[.\[]|$)", r"[\1]", path)


def _dotted(parts: list[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(parts))


def _inside(inner: str, outer: str) -> bool:
    return inner.startswith(outer + ".") or inner.startswith(outer + "[")


def _shown(value: Any, top: bool = False) -> str:
    """``value`` written as on the command line: TOML, except that a top-level string stays bare."""
    if isinstance(value, str):
        return value if top else json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_shown(v)}" for k, v in value.items()) + "}"
    return str(value)


def _parse_overrides(overrides: list[str] | dict[str, Any] | None) -> list[tuple[list[str | int], Any, str]]:
    """``(key parts, value, label)`` of every override; the label names it in messages."""
    if not overrides:
        return []
    if isinstance(overrides, dict):
        return [(_parse_key(key, override_label(key, value)), value, override_label(key, value))
                for key, value in overrides.items()]
    parsed = []
    for text in overrides:
        key, value = _split_override(text)
        label = f"--set {text.strip()}"
        parsed.append((_parse_key(key, label), value, label))
    return parsed


def read_value(text: str) -> Any:
    """The value of a ``KEY=VALUE`` command-line item.

    A TOML value (``3``, ``0.1``, ``[1, 5]``, ``true``, ``"text"``) when it reads as one, else the text itself,
    stripped: bare words need no quotes on a command line (``--set run.device=cpu``).
    """
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text.strip()


def _split_override(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise RecipeError(f"override {text!r} is not of the form section.key=value", where=f"--set {text.strip()}",
                          fix='e.g. --set run.epochs=3 or --set loss.margin=0.1')
    key, raw_value = text.split("=", 1)
    return key.strip(), read_value(raw_value)


def _parse_key(key: str, label: str | None = None) -> list[str | int]:
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
        raise RecipeError(f"empty override key {key!r}", where=label, fix="e.g. --set run.epochs=3")
    return parts


def _apply_override(raw: dict[str, Any], parts: list[str | int], value: Any, label: str) -> None:
    node: Any = raw
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                raise RecipeError(f"index {part} does not exist in the recipe", where=label,
                                  fix="list sections are indexed from 0, e.g. regularizers.0.weight=2")
            node = node[part]
        else:
            if not isinstance(node, dict):
                raise RecipeError(f"{part!r} is not inside a table", where=label)
            if part not in node:
                node[part] = [] if isinstance(nxt, int) else {}
            node = node[part]
    last = parts[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise RecipeError(f"index {last} does not exist in the recipe", where=label,
                              fix="list sections are indexed from 0, e.g. regularizers.0.weight=2")
        node[last] = value
    elif not isinstance(node, dict):
        raise RecipeError("cannot set a key inside a value that is not a table", where=label)
    else:
        node[last] = value
