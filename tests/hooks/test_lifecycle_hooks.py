"""The six lifecycle hooks, heard by a plugin of the host during the shared tiny run (2 epochs of 4 steps, a
checkpoint after every step): called in order, with the documented arguments, and a read-only ``RunView``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import throwaway

from dmlplug.protocols import RunView

LIFECYCLE = ("on_run_start", "on_epoch_start", "on_step_end", "on_eval_end", "on_checkpoint", "on_run_end")


def test_every_lifecycle_call_gets_a_run_view(hooked_run):
    calls = hooked_run.recorder.calls
    assert {c.hook for c in calls} == set(LIFECYCLE)
    assert all(c.is_run_view for c in calls), [c.hook for c in calls if not c.is_run_view]
    runs = {id(c.run) for c in calls}
    assert len(runs) == 1  # one view of one run
    assert calls[0].hook == "on_run_start" and calls[-1].hook == "on_run_end"


@pytest.mark.hook("on_run_start")
def test_on_run_start(hooked_run):
    (start,) = hooked_run.recorder.of("on_run_start")
    run = start.run
    assert isinstance(run, RunView) and start.kwargs == {}
    assert (start.epoch, start.step) == (0, 0)
    assert run.name == "hooks" and not run.resumed and run.device == "cpu"
    assert Path(run.directory) == hooked_run.directory
    assert Path(run.checkpoint_dir) == hooked_run.directory / "checkpoints"
    assert run.steps_per_epoch == 4
    assert run.recipe.run.epochs == 2 and run.resolved_recipe["loss"]["margin"] == 0.3
    assert run.flat_recipe["regularizers[0].weight"] == 0.1 and run.flat_recipe["run.name"] == "hooks"
    assert set(start.components) == {"data.dataset", "data.sampler", "backbone", "head", "loss", "miner",
                                     "regularizers[0]", "evaluators[0]", "loggers[0]"}
    assert run.model is not None and run.dataset.train.num_classes == 8
    assert set(start.learning_rates) >= {"backbone", "head"} and start.latest_metrics == {}


@pytest.mark.hook("on_epoch_start")
def test_on_epoch_start(hooked_run):
    calls = hooked_run.recorder.of("on_epoch_start")
    assert [c.kwargs["epoch"] for c in calls] == [1, 2] and [c.epoch for c in calls] == [1, 2]
    assert [c.step for c in calls] == [0, 4]  # before the epoch's first step
    first_eval = hooked_run.recorder.of("on_eval_end")[1]
    assert calls[1].latest_metrics == first_eval.kwargs["metrics"]  # the evaluation after epoch 1


@pytest.mark.hook("on_step_end")
def test_on_step_end(hooked_run):
    calls = hooked_run.recorder.of("on_step_end")
    assert [c.kwargs["step"] for c in calls] == list(range(1, 9)) == [c.step for c in calls]
    assert [c.epoch for c in calls] == [1] * 4 + [2] * 4
    for call in calls:
        losses = call.kwargs["losses"]
        assert set(losses) == {"loss", "hooks_feature_norm", "total"}
        assert all(isinstance(v, float) and math.isfinite(v) for v in losses.values())
    assert all(c.learning_rates["backbone"] == pytest.approx(1e-3) for c in calls)


@pytest.mark.hook("on_eval_end")
def test_on_eval_end(hooked_run):
    calls = hooked_run.recorder.of("on_eval_end")
    assert [(c.kwargs["epoch"], c.kwargs["split"]) for c in calls] == [(0, "test"), (1, "test"), (2, "test")]
    assert [c.epoch for c in calls] == [0, 1, 2]
    for call in calls:
        metrics = call.kwargs["metrics"]
        assert 0.0 <= metrics["hooks/nn_agreement"] <= 1.0 and all(isinstance(v, float) for v in metrics.values())
    run = calls[-1].run
    assert run.initial_metrics == calls[0].kwargs["metrics"]
    assert run.latest_metrics == calls[-1].kwargs["metrics"]
    assert run.best_metrics == hooked_run.result.best_metrics
    assert run.eval_context is not None and len(run.eval_context.labels) == 16


@pytest.mark.hook("on_checkpoint")
def test_on_checkpoint(hooked_run):
    calls = hooked_run.recorder.of("on_checkpoint")
    assert calls and all(c.path_existed for c in calls)  # called after the file is written
    for call in calls:
        path = call.kwargs["path"]
        assert isinstance(path, Path) and path.parent == Path(call.run.checkpoint_dir) and path.suffix == ".pt"
    assert {c.step for c in calls} >= set(range(0, 9))  # initial, after every step (mid-epoch and epoch end)


@pytest.mark.hook("on_run_end")
def test_on_run_end(hooked_run):
    (end,) = hooked_run.recorder.of("on_run_end")
    assert end.kwargs == {"status": "completed", "error": None}
    assert (end.epoch, end.step) == (2, 8)


@pytest.mark.hook("on_run_end")
def test_on_run_end_hears_a_failed_run(host, tmp_path):
    from dmlplug.engine.launch import run_recipe
    from dmlplug.errors import RunError

    recorder = throwaway.Recorder()
    host.add_plugin(recorder, "hooks_failure_recorder")
    recipe = tmp_path / "fails.toml"
    recipe.write_text(throwaway.RECIPE.replace("weight = 0.1", "weight = 0.1\nnan_at_step = 2")
                      .replace("[evaluation]", "[evaluation]\ninitial = false"))
    try:
        with pytest.raises(RunError, match="hooks_feature_norm"):
            run_recipe(recipe, out=tmp_path / "run", quiet=True, host=host, device="cpu")
    finally:
        host.pm.unregister(recorder)
    (end,) = recorder.of("on_run_end")
    assert end.kwargs["status"] == "failed" and isinstance(end.kwargs["error"], RunError)
    assert end.is_run_view and end.step == 2 and [c.kwargs["step"] for c in recorder.of("on_step_end")] == [1]


def test_the_run_view_is_read_only(hooked_run):
    run = hooked_run.recorder.calls[0].run
    with pytest.raises(AttributeError):
        run.epoch = 5
    with pytest.raises(TypeError):
        run.components["loss"] = None
    assert run.epoch == 2 and "loss" in run.components
