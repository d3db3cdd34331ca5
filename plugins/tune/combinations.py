"""Every combination of values a space can draw, checked against the recipe before anything trains.

A value that validates alone can fail with another: the recipe's checks across sections (:func:`dmlplug.validate`
runs them: batch size against the sampler's group, a loss that needs two classes per batch, a component's
requirements against the others' capabilities ...) see the whole recipe; and a range's inner values are not its
ends (``data.sampler.m`` from 2 to 8 by 2 draws 6, which ``batch_size = 64`` refuses). So the space is enumerated:

* a categorical parameter at each of its choices, an int range at every value it can draw (``low``, ``low + step``
  ... ``high``), a float range at its two ends (its values are not countable; a rule between a float and another
  parameter is checked at the ends);
* a conditional parameter only where its condition holds, as :func:`.space.suggest` samples it;
* every combination of the categorical and int values, once with every float range at its lower end and once at
  its upper end, each validated as the recipe's overrides.

The enumeration is capped (:data:`LIMIT` validations): a space with more combinations is refused, with the fix
of constraining it, rather than checked in part.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from dmlplug.errors import DmlplugError, RecipeError

#: The most recipe validations a space may need (a few milliseconds each).
LIMIT = 2048


def drawn_values(param: Any) -> list[Any]:
    """The values a parameter is checked at: every choice, every value of an int range, a float range's ends."""
    if param.type == "categorical":
        return list(param.choices or ())
    low, high = param.low, param.high
    assert low is not None and high is not None  # checked by ParamSpec
    if param.type == "int":
        # a log-scaled int range draws every integer in it (Optuna's suggest_int with step 1)
        return list(range(int(low), int(high) + 1, int(param.step) if param.step else 1))
    return [low, high]


def count(space: Any) -> int:
    """How many validations :func:`check_combinations` makes (two float corners per discrete combination)."""
    items = list(space.params.items())
    named = {other for _, param in items for other in param.when}  # keys a condition reads: they branch

    def walk(index: int, chosen: dict[str, Any]) -> int:
        if index == len(items):
            return 1
        key, param = items[index]
        if not param.active(chosen):
            return walk(index + 1, chosen)
        if param.type == "float":
            return walk(index + 1, chosen)
        values = drawn_values(param)
        if key not in named:
            return len(values) * walk(index + 1, chosen)
        return sum(walk(index + 1, {**chosen, key: value}) for value in values)

    floats = any(param.type == "float" for param in space.params.values())
    return walk(0, {}) * (2 if floats else 1)


def combinations(space: Any) -> Iterator[dict[str, Any]]:
    """Every combination of the discrete values, once at the float ranges' lower ends and once at their upper."""
    items = list(space.params.items())
    corners = (0, 1) if any(param.type == "float" for param in space.params.values()) else (0,)

    def walk(index: int, chosen: dict[str, Any], corner: int) -> Iterator[dict[str, Any]]:
        if index == len(items):
            yield dict(chosen)
            return
        key, param = items[index]
        if not param.active(chosen):
            yield from walk(index + 1, chosen, corner)
            return
        values = [drawn_values(param)[corner]] if param.type == "float" else drawn_values(param)
        for value in values:
            yield from walk(index + 1, {**chosen, key: value}, corner)

    for corner in corners:
        yield from walk(0, {}, corner)


def check_combinations(space: Any, base: dict[str, Any]) -> None:
    """Validate the recipe with every combination of :func:`combinations` (and ``base``, the ``--set`` overrides).

    Raises:
        RecipeError: The space has more than :data:`LIMIT` combinations, or the recipe refuses one; the message
            names the combination's values and the recipe's reason.
    """
    import dmlplug

    total = count(space)
    if total > LIMIT:
        ranges = [key for key, param in space.params.items() if param.type == "int"
                  and len(drawn_values(param)) > 8]
        raise RecipeError(
            f"the space can draw {total} combinations of values, more than the {LIMIT} its validation checks",
            where=str(space.path),
            fix=("give the int ranges " + ", ".join(ranges) + " a step, or " if ranges else "")
            + "list the values that matter as categorical choices, so that every combination can be checked")
    for combination in combinations(space):
        try:
            dmlplug.validate(str(space.recipe_path), {**base, **combination})
        except DmlplugError as exc:
            culprits = _culprits(space, base, combination, exc.what) or combination
            values = ", ".join(f"{key} = {_show(value)}" for key, value in culprits.items())
            fix = "constrain the space so that no trial draws this combination (list the values that fit as " \
                  "categorical choices, or give the range a step that skips the others)"
            where = f"{space.path}: " + ", ".join(f'params."{key}"' for key in culprits)
            raise RecipeError(f"the space can draw {values}, which the recipe refuses: {exc.what}",
                              where=where, fix=fix + (f"; the recipe says: {exc.fix}" if exc.fix else "")) \
                from None


def _culprits(space: Any, base: dict[str, Any], combination: dict[str, Any], what: str) -> dict[str, Any]:
    """The values of a refused ``combination`` that its refusal needs (for the message).

    Each searched key in turn goes back to the recipe's own value, and stays there when the recipe still refuses
    the rest with the same message: ``data.sampler.m = 6`` is named alone (the recipe's batch size of 64 is no
    multiple of it), ``data.batch_size = 4`` together with the ``data.sampler.m = 4`` that leaves one class per
    batch.
    """
    import dmlplug

    kept = dict(combination)
    for key in list(combination):
        rest = {k: v for k, v in kept.items() if k != key}
        try:
            dmlplug.validate(str(space.recipe_path), {**base, **rest})
        except DmlplugError as exc:
            if exc.what == what:
                kept = rest
    return kept


def _show(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:g}"
    return repr(value)
