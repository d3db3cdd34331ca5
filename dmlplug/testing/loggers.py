"""Contract check of loggers."""

from __future__ import annotations

from typing import Any

from dmlplug.plugins import PluginHost
from dmlplug.testing.fixtures import build, expect, load_host, make_context


def check_logger(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """A logger builds and implements at least one lifecycle hook (and nothing that is not a hook)."""
    from dmlplug import hookspecs

    host = host or load_host()
    logger = build("loggers", name, make_context(host), **(params or {}))
    marked = [attr for attr in dir(logger) if hasattr(getattr(logger, attr, None), "dmlplug_impl")]
    expect(marked, f"logger {name!r}: implements no hook (mark methods with @dmlplug.hookimpl)")
    unknown = [m for m in marked if not hasattr(hookspecs, m)]
    expect(not unknown, f"logger {name!r}: {unknown} are not dmlplug hooks")
