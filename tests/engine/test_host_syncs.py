"""No device->host synchronisation per training step outside logging steps (issue #16 item 3).

On a CPU there is no device to wait for, so the test counts the calls that *would* wait on a GPU: every
conversion of a tensor to a host value (``item``, ``tolist``, ``float``/``int``/``bool``, ``cpu``, ``numpy``)
made by dmlplug's own code (the engine, the built-in loggers) while a step trains and its hooks run.
Conversions inside third-party libraries (PML's miners, the optimizer's CPU step counter) are theirs, not the
engine's, and loading the batch is not part of the step's device work, so both are left out.
"""

import sys
from pathlib import Path

import pytest
import torch
from e2e import TINY_RECIPE

import dmlplug
from dmlplug.engine import assembly
from dmlplug.plugins import get_host

CONVERSIONS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "cpu", "numpy")
OURS = tuple(str(Path(__file__).resolve().parents[2] / d) for d in ("dmlplug", "plugins"))


class SyncCounter:
    """Counts host conversions of tensors made by dmlplug's code, per optimizer step."""

    def __init__(self):
        self.step = 1  # conversions until the first on_step_end belong to step 1
        self.by_step: dict[int, list[str]] = {}
        self.paused = True
        self._inside = False

    def wrap(self, name):
        original = getattr(torch.Tensor, name)
        counter = self

        def counted(tensor, *args, **kwargs):
            if not counter.paused and not counter._inside:
                caller = sys._getframe(1).f_code.co_filename
                if caller.startswith(OURS):
                    counter.by_step.setdefault(counter.step, []).append(f"{name} in {caller}")
            counter._inside = True  # float(t) calls t.item(): one conversion, counted once
            try:
                return original(tensor, *args, **kwargs)
            finally:
                counter._inside = False

        return counted

    @dmlplug.hookimpl
    def on_step_end(self, run, step, losses):
        assert step == self.step
        self.step += 1


class PausedWhileLoading:
    """The training loader, with counting paused while a batch is loaded (data loading is not device work)."""

    def __init__(self, loader, counter):
        self.loader, self.counter = loader, counter

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        batches = iter(self.loader)
        while True:
            self.counter.paused = True
            try:
                batch = next(batches)
            except StopIteration:
                return
            self.counter.paused = False
            yield batch


@pytest.mark.parametrize("log_every", [3, 4])
def test_no_host_sync_outside_logging_steps(tmp_path, monkeypatch, log_every):
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(TINY_RECIPE + '[[loggers]]\nname = "tensorboard"\n')
    counter = SyncCounter()
    for name in CONVERSIONS:
        monkeypatch.setattr(torch.Tensor, name, counter.wrap(name))
    real_loader = assembly.train_loader
    monkeypatch.setattr(assembly, "train_loader",
                        lambda *a, **k: PausedWhileLoading(real_loader(*a, **k), counter))
    host = get_host()
    host.pm.register(counter, "sync-counter")
    steps = 8
    try:
        dmlplug.run(recipe, overrides=["data.sampler.batches_per_epoch=8", "data.batch_size=16",
                                       f"run.log_every={log_every}", "evaluation.initial=false"],
                    out=tmp_path / "r", quiet=True)
    finally:
        host.pm.unregister(counter)
    assert counter.step == steps + 1
    syncs = {step: counter.by_step.get(step, []) for step in range(1, steps + 1)}
    # zero outside logging steps; exactly one (the window's losses in one `tolist`) on a logging step
    expected = {step: 1 if step % log_every == 0 else 0 for step in syncs}
    assert {step: len(calls) for step, calls in syncs.items()} == expected, syncs
    assert all(call.startswith("tolist in") for calls in syncs.values() for call in calls), syncs
