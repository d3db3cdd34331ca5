"""export refuses a checkpoint of the untrained model (written before any training step: a best epoch 0, or a run
of zero epochs) with one message that says so and how to proceed, exit 2, nothing written; --allow-untrained
exports it."""

from __future__ import annotations

import json
import shutil

import pytest
from e2e import BUNDLE_RUN_SETS as SETS
from e2e import TINY_RECIPE

import dmlplug
from dmlplug.bundle.errors import BundleError


@pytest.fixture(scope="module")
def zero_epoch_run(tmp_path_factory):
    """The tiny run trained for zero epochs: its checkpoints hold the initial weights (step 0)."""
    folder = tmp_path_factory.mktemp("untrained")
    recipe = folder / "tiny.toml"
    recipe.write_text(TINY_RECIPE)
    sets = [s for s in SETS if not s.startswith("run.epochs")] + ["run.epochs=0"]
    result = dmlplug.run(recipe, overrides=sets, out=folder / "run", quiet=True)
    assert result.status == "completed"
    return folder / "run"


def _refused(code, err, out_dir):
    assert code == 2, err
    assert "holds the untrained model" in err and "before any training step" in err and "Traceback" not in err
    assert "--allow-untrained" in err and "--checkpoint last" in err  # how to proceed
    assert not out_dir.exists()


def test_a_zero_epoch_run_is_refused_unless_allowed(zero_epoch_run, tmp_path, cli):
    code, _, err = cli("export", zero_epoch_run, "--out", tmp_path / "b", "--format", "torchscript")
    _refused(code, err, tmp_path / "b")
    with pytest.raises(BundleError, match="holds the untrained model"):
        dmlplug.export(zero_epoch_run, tmp_path / "c", format="torchscript", calibrate=False)
    assert not (tmp_path / "c").exists()
    code, out, err = cli("export", zero_epoch_run, "--out", tmp_path / "b", "--format", "torchscript", "--images",
                         "8", "--no-calibrate", "--allow-untrained")
    assert code == 0, err
    source = json.loads((tmp_path / "b" / "bundle.json").read_text())["source"]
    assert source["step"] == 0 and source["epoch"] == 0


def test_a_best_checkpoint_of_epoch_0_is_refused_the_trained_last_one_is_not(run_dir, tmp_path, cli):
    """best.pt as a run writes it when its initial evaluation stays the best: epoch 0, step 0."""
    import torch

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    best = copy / "checkpoints" / "best.pt"
    state = torch.load(best, weights_only=False)
    assert state["step"] > 0  # the fixture's run trained
    torch.save({**state, "epoch": 0, "step": 0}, best)
    code, _, err = cli("export", copy, "--out", tmp_path / "b")
    _refused(code, err, tmp_path / "b")
    assert "the run's best evaluation was the initial one" in err and str(best) in err
    from dmlplug.bundle.export import checkpoint_position, refuse_untrained

    last = copy / "checkpoints" / "last.pt"
    assert checkpoint_position(last)["step"] > 0
    refuse_untrained(last, checkpoint_position(last))  # a trained checkpoint passes
