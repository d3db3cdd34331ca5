"""The recipe's structure (:class:`~dmlplug.recipe.schema.Recipe`), validated so that its mistakes stop nothing else.

pydantic reports every structural mistake of a recipe at once (an unknown key, a wrong type, a failed section
validator), but gives no :class:`Recipe` to validate the component tables of. :func:`validate_structure` then leaves
out each key a mistake is about (its section's default applies instead) and validates again: the component tables,
which the mistakes did not touch, can then be checked in the same pass (:mod:`dmlplug.recipe.loading`).
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import ValidationError

from dmlplug.errors import RecipeError
from dmlplug.recipe.schema import Recipe
from dmlplug.registry import format_validation_error

_FIX = "see docs/recipes.md for every section and key"


def validate_structure(raw: dict[str, Any]) -> tuple[Recipe | None, list[str]]:
    """``(recipe, its structural mistakes)`` of the interpolated raw recipe, the mistakes as ``path: message`` lines.

    Returns:
        ``(recipe, [])`` when the structure is valid; ``(recipe, lines)`` when it is not, ``recipe`` then being the
        recipe without the keys the mistakes are about (their defaults in their place: good for reading the component
        tables, not for the checks across sections); ``(None, lines)`` when even that does not validate (a required
        section is missing or is the mistake).
    """
    try:
        return Recipe.model_validate(raw), []
    except ValidationError as exc:
        lines = format_validation_error(exc, "", Recipe).splitlines()
        pruned = copy.deepcopy(raw)
        for detail in exc.errors():
            _drop(pruned, tuple(detail["loc"]))
    try:
        return Recipe.model_validate(pruned), lines
    except ValidationError:
        return None, lines


def structure_error(lines: list[str], where: str) -> RecipeError:
    """The structural mistakes as one error, every line in it (how a recipe with only those is reported)."""
    return RecipeError("invalid recipe:\n" + "\n".join(lines), where=where, fix=_FIX)


def structure_items(lines: list[str], where: str) -> list[RecipeError]:
    """The structural mistakes one by one, each with its own fix, to be listed with the other mistakes."""
    return [structure_error([line], where) for line in lines]


def _drop(tree: Any, loc: tuple[Any, ...]) -> None:
    """Remove the key ``loc`` leads to from ``tree`` (the nearest table holding it when it lies inside a list)."""
    while loc:
        node = tree
        for part in loc[:-1]:
            node = _child(node, part)
        if isinstance(node, dict) and loc[-1] in node:
            del node[loc[-1]]
            return
        # Inside a list (an [[evaluators]] item) removing an item would renumber the others: the list goes instead.
        loc = loc[:-1]


def _child(node: Any, part: Any) -> Any:
    if isinstance(node, dict):
        return node.get(part)
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        return node[part]
    return None
