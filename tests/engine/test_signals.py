"""SIGTERM / SIGINT: the run finishes the current step, writes a checkpoint and exits cleanly (non-zero)."""

import json
import os
import signal
import subprocess
import sys

import pytest
import torch
from test_resume import SMALL

import dmlplug
from dmlplug.engine.resume import RunInterrupted
from dmlplug.plugins import get_host

# Sends a signal to its own process from inside a training step (at a known step), through the real CLI.
SELF_SIGNAL = """
import os, signal, sys
from dmlplug import hookimpl
from dmlplug.plugins import get_host
from dmlplug.cli import main

class Signal:
    @hookimpl
    def on_step_end(self, run, step, losses):
        if step == 3:
            os.kill(os.getpid(), signal.SIGINT)

get_host().pm.register(Signal(), "self-signal")
main(sys.argv[1:])
"""


class _SignalAt:
    def __init__(self, step, signum):
        self.step, self.signum, self.steps_seen = step, signum, []

    @dmlplug.hookimpl
    def on_step_end(self, run, step, losses):
        self.steps_seen.append(step)
        if step == self.step:
            os.kill(os.getpid(), self.signum)


@pytest.fixture
def signal_at():
    host, registered = get_host(), []

    def register(step, signum):
        plugin = _SignalAt(step, signum)
        host.pm.register(plugin, f"signal-at-{len(registered)}")
        registered.append(plugin)
        return plugin

    yield register
    for plugin in registered:
        if host.pm.is_registered(plugin):
            host.pm.unregister(plugin)


def test_sigterm_checkpoints_after_the_step_and_the_run_resumes(tiny_recipe, tmp_path, signal_at):
    previous = signal.getsignal(signal.SIGTERM)
    plugin = signal_at(2, signal.SIGTERM)
    with pytest.raises(RunInterrupted, match="interrupted by SIGTERM at step 2") as info:
        dmlplug.run(tiny_recipe, overrides=[*SMALL, "run.checkpoint_every_steps=100"], out=tmp_path / "r",
                    quiet=True)
    assert info.value.exit_code == 128 + signal.SIGTERM
    assert plugin.steps_seen == [1, 2]  # the step in progress was finished, no further step started
    assert signal.getsignal(signal.SIGTERM) == previous  # handlers are restored
    state = torch.load(tmp_path / "r" / "checkpoints" / "last.pt", weights_only=False)
    assert (state["epoch"], state["step"], state["epoch_step"], state["epoch_complete"]) == (1, 2, 2, False)
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    assert results["status"] == "interrupted" and "--resume" in results["error"]

    get_host().pm.unregister(plugin)
    result = dmlplug.run(tmp_path / "r", resume=True, quiet=True)
    assert result.status == "completed"
    assert json.loads((tmp_path / "r" / "results.json").read_text())["steps"] == 8


def test_sigint_through_the_cli_exits_130_with_a_resume_hint(tiny_recipe, tmp_path):
    script = tmp_path / "self_signal.py"
    script.write_text(SELF_SIGNAL)
    overrides = [arg for pair in SMALL for arg in ("--set", pair)]
    proc = subprocess.run([sys.executable, str(script), "run", str(tiny_recipe), "--out", str(tmp_path / "r"),
                           "--quiet", *overrides, "--set", "evaluation.initial=false"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 130, proc.stderr
    assert "interrupted by SIGINT at step 3" in proc.stderr and f"dmlplug run {tmp_path / 'r'} --resume" in proc.stderr
    state = torch.load(tmp_path / "r" / "checkpoints" / "last.pt", weights_only=False)
    assert state["step"] == 3
    assert json.loads((tmp_path / "r" / "results.json").read_text())["status"] == "interrupted"
