"""Lifecycle hooks receive a read-only RunView of the live run, never the engine's Run."""

from __future__ import annotations

import pytest
import torch
from test_resume import SMALL

import dmlplug
from dmlplug.protocols import RunView


class Spy:
    """Records what every hook sees through the view."""

    def __init__(self):
        self.seen: list[tuple] = []
        self.views: set[int] = set()
        self.problems: list[str] = []

    def _check(self, run):
        if not isinstance(run, RunView) or type(run).__name__ == "Run":
            self.problems.append(f"hook got {type(run).__name__}")
        self.views.add(id(run))

    @dmlplug.hookimpl
    def on_run_start(self, run):
        self._check(run)
        self.start = {
            "epoch": run.epoch, "step": run.step, "resumed": run.resumed, "name": run.name, "device": run.device,
            "directory": run.directory, "checkpoint_dir": run.checkpoint_dir, "steps": run.steps_per_epoch,
            "components": sorted(run.components), "lrs": dict(run.learning_rates),
            "initial": dict(run.initial_metrics), "ctx": run.eval_context, "epochs": run.recipe.run.epochs,
            "flat": run.flat_recipe, "resolved_loss": run.resolved_recipe["loss"]["name"],
        }
        self.loss = run.components["loss"]
        # Nothing can be changed through the view.
        for attempt in (lambda: setattr(run, "epoch", 7), lambda: setattr(run, "model", None),
                        lambda: run.components.__setitem__("loss", None),
                        lambda: run.learning_rates.__setitem__("head", 1.0),
                        lambda: setattr(run.recipe.run, "epochs", 99),
                        lambda: run.recipe.backbone.__setitem__("model", "resnet50"),
                        lambda: run.latest_metrics.__setitem__("recall@1", 1.0)):
            with pytest.raises((AttributeError, TypeError)):
                attempt()
        run.resolved_recipe["run"]["epochs"] = 99  # a copy: editing it changes nothing
        run.flat_recipe["run.epochs"] = 99
        self.after_edit = (run.resolved_recipe["run"]["epochs"], run.flat_recipe["run.epochs"], run.recipe.run.epochs)

    @dmlplug.hookimpl
    def on_epoch_start(self, run, epoch):
        self._check(run)
        self.seen.append(("epoch", epoch, run.epoch, run.step))

    @dmlplug.hookimpl
    def on_step_end(self, run, step, losses):
        self._check(run)
        self.seen.append(("step", step, run.step, run.epoch, run.model.training))

    @dmlplug.hookimpl
    def on_eval_end(self, run, epoch, split, metrics):
        self._check(run)
        self.seen.append(("eval", epoch, dict(run.latest_metrics) == metrics, dict(run.initial_metrics),
                          dict(run.best_metrics), run.eval_context is not None))

    @dmlplug.hookimpl
    def on_checkpoint(self, run, path):
        self._check(run)
        self.seen.append(("checkpoint", run.step, path.name, path.parent == run.checkpoint_dir))

    @dmlplug.hookimpl
    def on_run_end(self, run, status, error):
        self._check(run)
        self.end = (status, dict(run.latest_metrics), dict(run.best_metrics), run.epoch, run.step)


def test_every_hook_gets_the_same_live_read_only_view(tiny_recipe, tmp_path):
    from dmlplug.plugins import get_host

    spy, host = Spy(), get_host()
    host.register_run_plugin(spy, "view-spy")
    try:
        result = dmlplug.run(tiny_recipe, overrides=[*SMALL, "run.epochs=1", "run.checkpoint_every_steps=100"],
                             out=tmp_path / "r", quiet=True)
    finally:
        host.unregister_run_plugin("view-spy")
    assert not spy.problems and len(spy.views) == 1
    start = spy.start
    assert (start["epoch"], start["step"], start["resumed"], start["name"], start["device"]) == (0, 0, False, "tiny",
                                                                                                 "cpu")
    assert start["directory"] == tmp_path / "r" and start["checkpoint_dir"] == tmp_path / "r" / "checkpoints"
    assert start["steps"] == 4 and start["epochs"] == 1
    assert start["components"] == ["backbone", "data.dataset", "data.sampler", "evaluators[0]", "head", "loggers[0]",
                                   "loss"]  # no [miner] in the recipe: no "miner"
    assert set(start["lrs"]) == {"backbone", "head"} and start["lrs"]["head"] == pytest.approx(1e-3)
    assert start["initial"] == {} and start["ctx"] is None
    assert start["flat"]["run.name"] == "tiny" and start["flat"]["evaluators[0].k"] == [1, 2]
    assert start["flat"]["data.batch_size"] == 8 and start["resolved_loss"] == "multi_similarity"
    assert spy.after_edit == (1, 1, 1)  # edits of the returned copies change nothing
    assert isinstance(spy.loss, torch.nn.Module)

    initial_eval = next(e for e in spy.seen if e[0] == "eval" and e[1] == 0)
    assert initial_eval[2] and initial_eval[3] == result.initial_metrics and initial_eval[5]
    assert initial_eval[4] == {}  # the untrained model is a baseline, never a candidate: nothing selected yet
    steps = [e for e in spy.seen if e[0] == "step"]
    assert [s[1] for s in steps] == [1, 2, 3, 4] and all(s[1] == s[2] and s[3] == 1 and s[4] for s in steps)
    assert ("epoch", 1, 1, 0) in spy.seen
    assert [c[1:] for c in spy.seen if c[0] == "checkpoint"] == [(0, "last.pt", True), (4, "last.pt", True)]
    assert spy.end == ("completed", result.metrics, result.best_metrics, 1, 4)
