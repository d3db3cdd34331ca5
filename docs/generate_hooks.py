"""Write docs/hooks.md from the docstrings of the hooks in dmlplug/hookspecs/.

Run ``python docs/generate_hooks.py`` after changing a hook; tests/core/test_docs.py fails when the
committed file is stale. Hooks appear in the order of ``dmlplug.hookspecs.__all__``, under the heading of their group.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

HEADER = """# Hooks reference

Generated from `dmlplug/hookspecs/` by `python docs/generate_hooks.py` — do not edit by hand.

Implement a hook with `@dmlplug.hookimpl` on a module-level function (or a method of a registered object)
with the same name and argument names (a subset of them is fine). The types in the signatures are public:
`Register`, `RunView` and `ReportSection` are in `dmlplug.protocols` ([plugin-api.md](plugin-api.md)).
Every hook has a test in `tests/hooks/` that implements it in a throwaway plugin.
"""

#: (heading, introduction, predicate on the hook name), in the order of the document.
GROUPS = (
    ("Registration hooks", "Called once when plugins load; each receives a `register` callback.",
     lambda name: name.startswith("register_") and name != "register_commands"),
    ("The command line", "Called when the `dmlplug` command starts (`register_commands`), by `dmlplug validate` "
     "for a file a plugin may own (`validate_file`), and by `dmlplug export` once the bundle is written "
     "(`on_bundle_exported`).",
     lambda name: name in ("register_commands", "validate_file", "on_bundle_exported")),
    ("Lifecycle hooks", "Called during every run, on every plugin and on the run's loggers; `run` is a read-only "
     "`RunView`. A hook may end the run early on purpose by raising `dmlplug.errors.RunStopped(reason, "
     "status=\"pruned\")` (any lowercase word but `completed`, `failed`, `interrupted`; default `stopped`): "
     "`results.json` then records that status and `reason` instead of `failed` and `error` "
     "([run-directory.md](run-directory.md)), `on_run_end` receives the status, and the exception goes on to the "
     "caller of `dmlplug.run` (the CLI exits with status 1). `dmlplug tune` ends a pruned trial's fold run this "
     "way.", lambda name: name.startswith("on_") and name != "on_bundle_exported"),
    ("Reports", "Called by `dmlplug report`, once per report.", lambda name: name == "report_section"),
)


def hookspecs_in_order() -> list:
    """Every hookspec function, in the order of ``dmlplug.hookspecs.__all__``."""
    from dmlplug import hookspecs

    hooks = [getattr(hookspecs, name) for name in hookspecs.__all__]
    return [f for f in hooks if inspect.isfunction(f) and hasattr(f, "dmlplug_spec")]


def render() -> str:
    """The Markdown text of the hooks reference.

    Raises:
        ValueError: A hook belongs to no group (add it to ``GROUPS``).
    """
    hooks = hookspecs_in_order()
    ungrouped = [f.__name__ for f in hooks if not any(match(f.__name__) for _, _, match in GROUPS)]
    if ungrouped:
        raise ValueError(f"hooks in no group of docs/generate_hooks.py: {ungrouped}")
    parts = [HEADER]
    for heading, intro, match in GROUPS:
        parts.append(f"\n## {heading}\n\n{intro}\n")
        for func in (f for f in hooks if match(f.__name__)):
            signature = str(inspect.signature(func)).replace("'", "")
            parts.append(f"\n### `{func.__name__}{signature}`\n\n{inspect.cleandoc(func.__doc__ or '')}\n")
    return "".join(parts)


if __name__ == "__main__":
    target = Path(__file__).with_name("hooks.md")
    target.write_text(render())
    sys.stdout.write(f"wrote {target}\n")
