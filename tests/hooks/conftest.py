"""Every hook exercised: throwaway plugins on a fresh host, and ONE tiny training run the tests share.

Mark each test with the hook it covers, ``@pytest.mark.hook("on_step_end")``: test_every_hook_tested.py fails
when a hookspec of dmlplug.hookspecs has no such test.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import throwaway


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "hook(name): the dmlplug hookspec the test exercises (tests/hooks/test_every_hook_tested.py)")


@pytest.fixture
def use_host(monkeypatch):
    """``use_host(*pairs)``: make the command line, export and the report use a fresh host (built-ins, no entry
    points) with the given ``(plugin, name)`` pairs, for this test."""
    from dmlplug import plugins

    def use(*pairs):
        host = throwaway.fresh_host(*pairs)
        monkeypatch.setattr(plugins, "_HOST", host)
        monkeypatch.setattr(plugins, "get_host", lambda **_: host)
        return host

    return use


@pytest.fixture(scope="session")
def registering() -> dict[str, throwaway.RegisteringPlugin]:
    """One throwaway registering plugin per component kind, by kind."""
    return {cls.kind: cls() for cls in throwaway.REGISTERING}


@pytest.fixture(scope="session")
def host(registering):
    """A fresh host with every throwaway registering plugin (named after its component)."""
    return throwaway.fresh_host(*((plugin, plugin.name) for plugin in registering.values()))


@dataclass
class HookedRun:
    """The outcome of the shared run: its host, result, directory and the recorded hook calls."""

    host: Any
    result: Any
    directory: Path
    recorder: throwaway.Recorder
    registering: dict[str, throwaway.RegisteringPlugin]
    builds: dict[str, list[tuple[Any, Any, Any]]]

    def built(self, kind: str) -> tuple[Any, Any, Any]:
        """``(params, ctx, component)`` of the run's build of the throwaway component of ``kind``."""
        calls = self.builds[kind]
        assert len(calls) == 1, f"the run built the throwaway {kind} {len(calls)} times"
        return calls[0]


@pytest.fixture(scope="session")
def hooked_run(host, registering, tmp_path_factory):
    """Train the throwaway recipe once (2 epochs of 4 steps, a checkpoint after every step), recording hooks."""
    folder = tmp_path_factory.mktemp("hooked_run")
    result, recorder, builds = throwaway.recorded_run(host, registering, folder)
    return HookedRun(host, result, folder / "run", recorder, registering, builds)
