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


def type_label(annotation: Any) -> str:
    """A short, readable type for the docs (``float``, ``int | None``, ``'all' | int``, ``list[loss table]``).

    A nested component table (``Annotated[ComponentTable, TableOf("distances")]``) is a ``distance table``; a nested
    table of a plugin's own models (a PML regulariser in a loss) is a ``table``.
    """
    from dmlplug.params import Params
    from dmlplug.registry import singular
    from dmlplug.tables import ComponentTable, table_kind

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "None"
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_label(a) for a in args)
    if origin is typing.Annotated:
        kind = table_kind(annotation)
        if args[0] is ComponentTable and kind:
            return f"{singular(kind)} table"
        models = typing.get_args(args[0])
        if models and all(isinstance(m, type) and issubclass(m, Params) for m in models):
            return "table"  # a discriminated union of table models
        return type_label(args[0])  # a type with bounds, Annotated[int, Ge(1)]
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_label(a) for a in args)}]"
    if isinstance(annotation, type):
        return "table" if issubclass(annotation, Params) else annotation.__name__
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
        rows.append(f"| `{field.alias or name}` | {_cell(type_label(field.rebuild_annotation()))} | "
                    f"{_cell(default_label(field))} | {_cell(field.description or '')} |")
    return [*rows, ""]


def render() -> str:
    """The whole of docs/components.md."""
    from dmlplug.plugins import PluginHost
    from dmlplug.protocols.kinds import KINDS
    from dmlplug_builtins.pml.catalog import REGULARIZERS
    from dmlplug_builtins.pml.introspect import regularizer_models

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
              'Distances and reducers are tables inside a loss or miner, e.g. `[loss.distance]` with `name = '
              '"cosine_similarity"`: any registered one (see Distances and Reducers above). PML regularizers are '
              "tables inside a PML loss (`embedding_regularizer`, and `weight_regularizer` of losses with class "
              'weights), e.g. `[loss.embedding_regularizer]` with `name = "lp"`.', "", "### PML regularizers", ""]
    for spec in REGULARIZERS:
        model = regularizer_models()[spec.name]
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
