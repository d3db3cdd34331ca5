"""Arguments and options that several commands of the host share (their ``Annotated`` types)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

#: The recipe argument of ``run`` and ``validate``.
RecipeArg = Annotated[Path, typer.Argument(help="Path to a TOML recipe.", show_default=False, metavar="RECIPE")]
#: ``--set section.key=value`` overrides of a recipe (repeatable).
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a recipe value: section.key=value (repeatable)."),
]
