"""Every mistake of a recipe in one message: :class:`Mistakes` collects them, :class:`RecipeMistakes` reports them.

``dmlplug validate`` checks a recipe in stages (structure, each component table, then the checks across tables);
a stage that fails no longer stops the others that do not depend on it, so three typos in three tables are three
items of one error instead of three runs of the command. One mistake is raised as it is (its own class and
message); several become one :class:`RecipeMistakes`, numbered, each with its own ``where`` and ``fix``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from dmlplug.errors import DmlplugError, RecipeError


class RecipeMistakes(RecipeError):
    """Several independent mistakes of one recipe, reported together (a :class:`~dmlplug.errors.RecipeError`).

    Args:
        mistakes: The errors, in the order the recipe is checked (two or more).
        where: The recipe (file path, ``"<dict>"``).
        skipped: The checks that did not run because they need what these mistakes left invalid, for the fix.

    Attributes:
        mistakes: The errors, each with its own ``what`` / ``where`` / ``fix``.
    """

    def __init__(self, mistakes: list[DmlplugError], *, where: str, skipped: str | None = None):
        self.mistakes = list(mistakes)
        fix = "correct each one as its own fix says, then validate again"
        super().__init__(f"the recipe has {len(self.mistakes)} mistakes", where=where,
                         fix=f"{fix}; {skipped} run once these are corrected" if skipped else fix)
        self.refresh()

    def refresh(self) -> None:
        """Render the message again from :attr:`mistakes` (after one of them was changed in place)."""
        self.what = f"the recipe has {len(self.mistakes)} mistakes:\n" + "\n".join(
            _item(i, mistake) for i, mistake in enumerate(self.mistakes, start=1))
        self.args = (self.render(),)


def _item(number: int, mistake: DmlplugError) -> str:
    """``  1. what`` with its ``where`` and ``fix`` lines, every continuation line under the text of the first."""
    head = f"  {number}. "
    indent = " " * len(head)
    lines = mistake.what.splitlines() or [""]
    if mistake.where:
        lines.append(f"where: {mistake.where}")
    if mistake.fix:
        lines.append(f"fix:   {mistake.fix}")
    return head + lines[0] + "".join(f"\n{indent}{line}" for line in lines[1:] if line.strip())


class Mistakes:
    """The mistakes found so far while a recipe is checked.

    ``with mistakes.collect(): check()`` records a :class:`~dmlplug.errors.DmlplugError` of ``check`` and goes on;
    :meth:`raise_if_any` raises what was found.
    """

    def __init__(self) -> None:
        self.found: list[DmlplugError] = []

    def __bool__(self) -> bool:
        return bool(self.found)

    @contextmanager
    def collect(self) -> Iterator[None]:
        """Record a :class:`~dmlplug.errors.DmlplugError` raised inside the block instead of letting it out."""
        try:
            yield
        except RecipeMistakes as exc:  # a stage that collects its own: its items, not one item of items
            self.found.extend(exc.mistakes)
        except DmlplugError as exc:
            self.found.append(exc)

    def raise_if_any(self, where: str, *, skipped: str | None = None) -> None:
        """Raise the one mistake as it is, several as one :class:`RecipeMistakes`; nothing when none was found.

        Args:
            where: The recipe.
            skipped: What was not checked because of these mistakes (see :class:`RecipeMistakes`).
        """
        if len(self.found) == 1:
            raise self.found[0]
        if self.found:
            raise RecipeMistakes(self.found, where=where, skipped=skipped)
