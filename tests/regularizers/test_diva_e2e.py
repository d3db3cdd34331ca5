"""The glyphs DiVA recipe trains clearly above its untrained model on CPU; the queue and the EMA copy are
checkpointed."""

import json
import tomllib

import pytest
import torch
from e2e import LEARNING_PROTOCOL, ROOT, assert_learns, run_cli

# The shared learning protocol (tests/shared/e2e.py); a key queue longer than the run's steps, so that the queue
# is never full and its fill level counts the batches enqueued.
SHORT = [*LEARNING_PROTOCOL, "regularizers.0.n_key_batches=64"]


@pytest.mark.slow
def test_glyphs_diva_recipe_learns_and_checkpoints_its_state(tmp_path):
    args = [a for s in SHORT for a in ("--set", s)]
    proc = run_cli("run", ROOT / "recipes" / "glyphs_diva.toml", "--out", tmp_path / "run", "--quiet", *args)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "completed"
    assert_learns(tmp_path / "run")

    recipe = tomllib.loads((ROOT / "recipes" / "glyphs_diva.toml").read_text())
    batch = recipe["data"]["batch_size"]
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", map_location="cpu", weights_only=False)
    diva = state["regularizers"]["diva"]
    # Every optimizer step enqueued one full batch of keys, and the queue is not full yet.
    steps = results["steps"]
    assert 0 < steps * batch < len(diva["queue"]) and int(diva["queue_filled"]) == steps * batch
    keys = diva["queue"][len(diva["queue"]) - int(diva["queue_filled"]):]
    assert torch.allclose(keys.norm(dim=1), torch.ones(len(keys)), atol=1e-4)
    # The EMA copy is saved, and after training it differs from the trained model (momentum 0.9 < 1).
    ema, model = state["ema"], state["model"]
    name = "head.heads.selfsimilarity.weight"
    assert ema[name].shape == model[name].shape and not torch.equal(ema[name], model[name])
    # The three parameter groups of DiVA's own parameters are in the optimizer.
    group_names = {g.get("name") for g in state["optimizer"]["param_groups"]}
    assert {"beta", "diva_beta", "diva_regressors"} <= group_names
