"""User-facing errors.

Every error a user can cause by their input is a :class:`DmlplugError`: the CLI prints it as one
message (what went wrong, where, how to fix it) and exits non-zero, without a traceback unless
``--debug`` is given.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class DmlplugError(Exception):
    """An error caused by the user's input, reported without a traceback.

    Args:
        what: What went wrong, one sentence.
        where: Where it happened (file, recipe key, plugin, path), if known.
        fix: How to fix it, if known.
    """

    exit_code = 2

    def __init__(self, what: str, *, where: str | None = None, fix: str | None = None):
        self.what = what
        self.where = where
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        """The whole message as printed by the CLI."""
        lines = [self.what]
        if self.where:
            lines.append(f"  where: {self.where}")
        if self.fix:
            lines.append(f"  fix:   {self.fix}")
        return "\n".join(lines)


class RecipeError(DmlplugError):
    """The recipe cannot be parsed or does not validate."""


class ComponentError(DmlplugError):
    """A component name is unknown or a component cannot be built."""


class PluginError(DmlplugError):
    """A plugin failed to load or registered something invalid."""


class DataError(DmlplugError):
    """A dataset is missing, incomplete or corrupt."""


class RunError(DmlplugError):
    """The run cannot start or continue (device, output directory, numerical failure)."""


def did_you_mean(name: str, candidates: Iterable[str], n: int = 3) -> str:
    """A ' (did you mean ...?)' suffix for ``name``, or an empty string when nothing is close."""
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=n, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"
