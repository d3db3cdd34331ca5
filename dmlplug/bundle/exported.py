"""After ``dmlplug export``: the ``on_bundle_exported`` hook, called on every plugin once the bundle is complete.

The bundle is written and verified before any plugin sees it, so a plugin that fails (a tracking server that does not
answer) cannot cost the user the bundle: the export then fails with a message that says the bundle is there and
valid, and what the plugin could not do. With ``log_model`` (``dmlplug export --log-model``) the user asked for the
bundle to be logged as a model: an export on which no plugin did so fails too, rather than end quietly without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from dmlplug.bundle.errors import BundleError
from dmlplug.errors import DmlplugError


def announce_export(bundle: Path, manifest: Mapping[str, Any], run_dir: Path | None, *, log_model: bool,
                    say: Callable[[str], Any]) -> list[str]:
    """Call ``on_bundle_exported`` on every plugin; ``say`` each line they return, and return the lines.

    Args:
        bundle: The written bundle folder.
        manifest: Its ``bundle.json``.
        run_dir: The exported run's directory (``None``: a checkpoint file outside a run).
        log_model: The user asked for the bundle to be logged as a model (``--log-model``).
        say: Prints a progress line.

    Raises:
        BundleError: A plugin failed, or ``log_model`` was asked and no plugin logged the bundle; the message
            says that the bundle was written and stays.
    """
    from dmlplug.plugins import get_host

    failures: list[tuple[str, Exception]] = []
    arguments = {"bundle": bundle, "manifest": MappingProxyType(dict(manifest)), "run_dir": run_dir,
                 "log_model": log_model}
    results = get_host().call_each("on_bundle_exported", lambda plugin: arguments,
                                   on_error=lambda plugin, error: failures.append((plugin, error)))
    lines = [str(line) for _, line in results if isinstance(line, str) and line]
    for line in lines:
        say(line)
    if failures:
        raise _failed(bundle, failures)
    if log_model and not lines:
        raise BundleError(f"the bundle {bundle} was written and verified (it stays), but no plugin logged it as a "
                          f"model: --log-model logs the bundle to the experiment tracker of the run, and "
                          f"{_nothing_tracked(run_dir)}", where=str(run_dir or bundle),
                          fix="export without --log-model; the built-in mlflow logger logs the bundle of a run "
                              "trained with it ([[loggers]] name = \"mlflow\", docs/monitoring.md)")
    return lines


def _nothing_tracked(run_dir: Path | None) -> str:
    if run_dir is None:
        return "a checkpoint file outside a run directory has no run to log to"
    return "no plugin tracks this run as one to log models to"


def _failed(bundle: Path, failures: list[tuple[str, Exception]]) -> BundleError:
    """One error for the plugins that failed: what each could not do, where, and how to fix it."""
    whats, wheres, fixes = [], [], []
    for plugin, error in failures:
        if isinstance(error, DmlplugError):
            whats.append(f"plugin {plugin!r}: {error.what}")
            wheres.extend([error.where] if error.where else [])
            fixes.extend([error.fix] if error.fix else [])
        else:  # a bug of the plugin, not the user's doing
            first = (str(error).strip().splitlines() or [""])[0][:300]
            whats.append(f"plugin {plugin!r}: on_bundle_exported failed with {type(error).__name__}: {first}")
            fixes.append(f"report it to the authors of {plugin!r} (`dmlplug plugins` shows where it comes from)")
    return BundleError(f"the bundle {bundle} was written and verified (it stays), but " + "; ".join(whats),
                       where="; ".join(wheres) or str(bundle), fix="; ".join(fixes) or None)
