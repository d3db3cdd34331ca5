"""The glyphs DiVA recipe runs end to end on CPU; the queue and the EMA copy are checkpointed."""

import json
import tomllib

import torch
from e2e import ROOT, run_cli

SHORT = ["run.epochs=1", "data.dataset.num_classes=60", "data.dataset.images_per_class=12", "evaluation.every=1",
         "evaluation.initial=false"]


def test_glyphs_diva_recipe_runs_and_checkpoints_its_state(tmp_path):
    args = [a for s in SHORT for a in ("--set", s)]
    proc = run_cli("run", ROOT / "recipes" / "glyphs_diva.toml", "--out", tmp_path / "run", "--quiet", *args)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "completed" and results["metrics"]["recall@1"] > 0

    recipe = tomllib.loads((ROOT / "recipes" / "glyphs_diva.toml").read_text())
    batch = recipe["data"]["batch_size"]
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", map_location="cpu", weights_only=False)
    diva = state["regularizers"]["diva"]
    # Every optimizer step enqueued one full batch of keys (30 training classes x 12 images -> 5 batches of 64).
    steps = results["steps"]
    assert steps > 0 and int(diva["queue_filled"]) == min(steps * batch, len(diva["queue"]))
    keys = diva["queue"][len(diva["queue"]) - int(diva["queue_filled"]):]
    assert torch.allclose(keys.norm(dim=1), torch.ones(len(keys)), atol=1e-4)
    # The EMA copy is saved, and after training it differs from the trained model (momentum 0.9 < 1).
    ema, model = state["ema"], state["model"]
    name = "head.heads.selfsimilarity.weight"
    assert ema[name].shape == model[name].shape and not torch.equal(ema[name], model[name])
    # The three parameter groups of DiVA's own parameters are in the optimizer.
    group_names = {g.get("name") for g in state["optimizer"]["param_groups"]}
    assert {"beta", "diva_beta", "diva_regressors"} <= group_names
