"""A hook that raises dmlplug.errors.RunStopped ends the run early on purpose: results.json and on_run_end carry
its status and reason (not "failed" and an error), and the exception reaches the caller of dmlplug.run."""

import json

import pytest
from e2e import TINY_RECIPE

import dmlplug
from dmlplug import hookimpl
from dmlplug.errors import RunError, RunStopped


class StopAfterFirstEvaluation:
    def __init__(self):
        self.ended = []

    @hookimpl
    def on_eval_end(self, run, epoch, split, metrics):
        if epoch >= 1:
            raise RunStopped(f"enough at epoch {epoch}", status="pruned")

    @hookimpl
    def on_run_end(self, run, status, error):
        self.ended.append((status, error))


def test_a_hook_stops_the_run_with_its_status_and_reason(tmp_path, single_thread):
    (tmp_path / "r.toml").write_text(TINY_RECIPE)
    hook = StopAfterFirstEvaluation()
    overrides = ["run.epochs=2", "data.dataset.images_per_class=4", "evaluation.initial=false",
                 "evaluation.pictures=false", "backbone.model=\"test_resnet\""]
    with pytest.raises(RunStopped, match="enough at epoch 1") as caught:
        dmlplug.run(str(tmp_path / "r.toml"), overrides, out=tmp_path / "run", quiet=True, hooks=[hook])
    assert isinstance(caught.value, RunError) and caught.value.status == "pruned"
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "pruned" and results["reason"] == "enough at epoch 1" and "error" not in results
    assert results["steps"] > 0 and results["epochs_completed"] == 0  # stopped after epoch 1's evaluation
    assert hook.ended == [("pruned", caught.value)]


@pytest.mark.parametrize("status", ["completed", "failed", "interrupted", "Pruned", "two words", ""])
def test_a_status_that_would_read_as_another_outcome_is_refused(status):
    with pytest.raises(ValueError, match="lowercase word other than completed, failed and interrupted"):
        RunStopped("x", status=status)
    assert RunStopped("x").status == "stopped"
