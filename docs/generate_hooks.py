"""Write docs/hooks.md from the docstrings in dmlplug/hookspecs.py.

Run ``python docs/generate_hooks.py`` after changing a hook; tests/core/test_docs.py fails when the
committed file is stale.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

HEADER = """# Hooks reference

Generated from `dmlplug/hookspecs.py` by `python docs/generate_hooks.py` — do not edit by hand.

Implement a hook with `@dmlplug.hookimpl` on a module-level function (or a method of a registered object)
with the same name and argument names. Registration hooks are called once when plugins load; lifecycle
hooks are called during every run, on every plugin and on the run's loggers.
"""


def render() -> str:
    """The Markdown text of the hooks reference."""
    from dmlplug import hookspecs

    parts = [HEADER]
    for name, func in inspect.getmembers(hookspecs, inspect.isfunction):
        if not hasattr(func, "dmlplug_spec"):
            continue
        signature = str(inspect.signature(func)).replace("'", "")
        parts.append(f"\n## `{name}{signature}`\n\n{inspect.cleandoc(func.__doc__ or '')}\n")
    return "".join(parts)


if __name__ == "__main__":
    target = Path(__file__).with_name("hooks.md")
    target.write_text(render())
    sys.stdout.write(f"wrote {target}\n")
