"""User-facing errors.

Every error a user can cause by their input is a :class:`DmlplugError`: the CLI prints it as one
message (what went wrong, where, how to fix it) and exits non-zero, without a traceback unless
``--debug`` is given.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

# pydantic words a validator's message as "Value error, <message>" ("Assertion failed, ..." for an assert);
# the prefix says nothing to a user. Removed at the start of a line or after ": " / "(".
_PYDANTIC_PREFIX = re.compile(r"(?:^|(?<=[\s:(]))(?:Value error|Assertion failed), ", re.MULTILINE)
# How a fix travels inside another error's text: a rendered message's own "fix:" line, "(fix: ...)", or
# "...; fix: ..." to the end of the line (where pydantic may still append " (got <input>)").
_FIX_LINE = re.compile(r"^[ \t]*fix:[ \t]*(?P<fix>.*)(?:\n|$)", re.MULTILINE)
_FIX_PARENS = re.compile(r"[ \t]*\(fix:[ \t]*(?P<fix>[^()]*(?:\([^()]*\)[^()]*)*)\)")
_FIX_TAIL = re.compile(r";[ \t]*fix:[ \t]*(?P<fix>.*?)(?P<got> \(got .*\))?$", re.MULTILINE)


class DmlplugError(Exception):
    """An error caused by the user's input, reported without a traceback.

    The message is tidied once, here, whatever raised it: pydantic's "Value error, " prefixes are removed, and
    a fix carried inside ``what`` (a validator's ``"...; fix: ..."``, ``"(fix: ...)"`` or a nested error's
    rendered ``fix:`` line) is moved out of it and replaces ``fix``, being the more specific of the two, so
    the message has at most one fix line.

    Args:
        what: What went wrong, one sentence.
        where: Where it happened (file, recipe key, plugin, path), if known.
        fix: How to fix it, if known.
    """

    exit_code = 2

    def __init__(self, what: str, *, where: str | None = None, fix: str | None = None):
        self.what, self.fix = _tidy_message(what, fix)
        self.where = where
        super().__init__(self.render())

    def render(self) -> str:
        """The whole message as printed by the CLI."""
        lines = [self.what]
        if self.where:
            lines.append(f"  where: {self.where}")
        if self.fix:
            lines.append(f"  fix:   {self.fix}")
        return "\n".join(lines)

    def set_where(self, where: str | None) -> None:
        """Replace :attr:`where` (e.g. by the ``--set`` override that caused the error); the message follows."""
        self.where = where
        self.args = (self.render(),)


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


class RunStopped(RunError):
    """Raised by a hook to end a run early on purpose, e.g. a pruned trial of a search (docs/hooks.md).

    The engine ends the run as for a failure (``on_run_end``, ``results.json``, the exception goes on to the
    caller), but records ``status`` instead of ``failed`` and the reason as ``reason`` instead of ``error``, so
    whoever reads the run directory sees that it was stopped, not that it crashed.

    Args:
        reason: Why the run stopped, one sentence.
        status: The run's status: a lowercase word other than ``completed``, ``failed`` and ``interrupted``.
        where: Where it was decided, if useful.
    """

    exit_code = 1

    def __init__(self, reason: str, *, status: str = "stopped", where: str | None = None):
        if not status.isidentifier() or not status.islower() or status in ("completed", "failed", "interrupted"):
            raise ValueError(f"RunStopped status must be a lowercase word other than completed, failed and "
                             f"interrupted; got {status!r}")
        self.status = status
        super().__init__(reason, where=where)


def did_you_mean(name: str, candidates: Iterable[str], n: int = 3) -> str:
    """A ' (did you mean ...?)' suffix for ``name``, or an empty string when nothing is close."""
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=n, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


def _tidy_message(what: str, fix: str | None) -> tuple[str, str | None]:
    """``(what, fix)`` without pydantic's prefixes and with the fixes found inside ``what`` as the one fix.

    Args:
        what: The error's text, possibly holding validator messages of pydantic and nested errors.
        fix: The fix given with it (a general one, e.g. "see `dmlplug list losses --params`").

    Returns:
        ``what`` without "Value error, " / "Assertion failed, " and without embedded fixes; the embedded fixes
        (distinct, in order, joined by "; ") when there are any, else ``fix``.
    """
    what = _PYDANTIC_PREFIX.sub("", what)
    found: list[str] = []

    def take(match: re.Match[str]) -> str:
        text = match.group("fix").strip()
        if text and text not in found:
            found.append(text)
        return match.groupdict().get("got") or ""

    for pattern in (_FIX_LINE, _FIX_PARENS, _FIX_TAIL):
        what = pattern.sub(take, what)
    what = "\n".join(line.rstrip() for line in what.rstrip("\n").split("\n"))
    return what, "; ".join(found) if found else fix
