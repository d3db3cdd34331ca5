"""Write docs/components.md from the component registry (every kind, component and parameter).

Usage::

    python docs/generate_components.py          # rewrite docs/components.md
    python docs/generate_components.py --check  # exit 1 when docs/components.md is stale

Only the built-in plugins are documented (entry-point plugins installed on one machine would make the
file differ between machines). ``tests/components/test_docs_fresh.py`` runs the check.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic_core import PydanticUndefined

OUTPUT = Path(__file__).with_name("components.md")
REGENERATE = "python docs/generate_components.py"


def type_label(annotation: Any, nested: str | None = None) -> str:
    """A short, readable type for the docs (``float``, ``int | None``, ``'all' | int``, ``list[loss table]``).

    Args:
        annotation: The field's annotation.
        nested: The kind of component table the field holds (``"loss"``, ``"distance"`` ...), if any.
    """
    from dmlplug.params import Params

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    table = f"{nested} table" if nested else "table"
    if annotation is type(None):
        return "None"
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_label(a, nested) for a in args)
    if origin is typing.Annotated or (nested and origin is dict):
        # A discriminated union of table models, or a registry-validated {name = ...} dict.
        return table
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_label(a, nested) for a in args)}]"
    if isinstance(annotation, type):
        return table if issubclass(annotation, Params) else annotation.__name__
    return str(annotation)


def default_label(field: Any) -> str:
    """The default value as it would be written in a recipe (``required`` when there is none)."""
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    return "none" if value is None else repr(value)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def params_table(model: Any) -> list[str]:
    """Markdown table rows of a Params model."""
    if not model.model_fields:
        return ["No parameters.", ""]
    rows = ["| parameter | type | default | description |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        rows.append(f"| `{name}` | {_cell(type_label(field.annotation, extra.get('nested')))} | "
                    f"{_cell(default_label(field))} | {_cell(field.description or '')} |")
    return [*rows, ""]


def render() -> str:
    """The whole of docs/components.md."""
    from dmlplug.plugins import PluginHost
    from dmlplug.registry import KINDS
    from dmlplug_builtins.pml.catalog import DISTANCES, REDUCERS, REGULARIZERS
    from dmlplug_builtins.pml.introspect import reducer_models, table_model

    registry = PluginHost().load(entry_points=False).registry
    lines = ["# Components", "",
             f"Generated from the registry by `{REGENERATE}`; do not edit by hand.", "",
             "Every component is used in a recipe by name (or alias) with the parameters listed. "
             "`num_classes` and `embedding_size` always come from the run, never from the recipe.", ""]
    for kind in KINDS:
        infos = list(registry.infos(kind))
        lines += [f"## {kind.capitalize()}", ""]
        if not infos:
            lines += ["None registered.", ""]
        for info in infos:
            lines += [f"### `{info.name}`", "", info.description or "", "",
                      f"- plugin: `{info.plugin}`"]
            if info.aliases:
                lines.append("- aliases: " + ", ".join(f"`{a}`" for a in info.aliases))
            if info.tags:
                lines.append("- tags: " + ", ".join(f"`{t}`" for t in sorted(info.tags)))
            if info.requires:
                lines.append("- requires: " + ", ".join(f"`{r}`" for r in sorted(info.requires)))
            lines += ["", *params_table(info.params)]
    lines += ["## Nested tables", "",
              "Distances, reducers and PML regularizers are tables inside a loss or miner, e.g. "
              '`[loss.distance]` with `name = "cosine_similarity"`.', ""]
    for title, table in (("Distances", DISTANCES), ("Reducers", REDUCERS), ("PML regularizers", REGULARIZERS)):
        lines += [f"### {title}", ""]
        for spec in table:
            model = reducer_models()[spec.name] if table is REDUCERS else table_model(spec, "table")
            names = ", ".join(f"`{a}`" for a in spec.aliases)
            lines += [f"#### `{spec.name}`", "", spec.description, "", f"- aliases: {names}", ""]
            fields = {k: v for k, v in model.model_fields.items() if k != "name"}
            lines += params_table(type("Fields", (), {"model_fields": fields}))
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    """Write the file, or with ``--check`` report whether it is stale."""
    text = render()
    if "--check" in argv:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT} is stale; regenerate it with: {REGENERATE}")
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
