"""End to end on CPU: recipes/glyphs_s2sd.toml (shrunk to about a minute) trains clearly above its untrained
model, evaluates only the base embedding and checkpoints the S2SD state; recipes/cub_s2sd.toml validates with the
reference settings."""

from __future__ import annotations

import math

import pytest
import torch
from e2e import LEARNING_PROTOCOL, ROOT, assert_learns, run_cli


@pytest.mark.slow
def test_glyphs_s2sd_recipe_learns_end_to_end(tmp_path):
    from dmlplug.engine.launch import run_recipe
    from dmlplug.plugins import get_host

    result = run_recipe(ROOT / "recipes" / "glyphs_s2sd.toml", LEARNING_PROTOCOL, out=tmp_path / "run", device="cpu",
                        quiet=True, host=get_host())
    assert result.status == "completed" and math.isfinite(result.metrics["map@r"])
    assert_learns(result.directory)
    state = torch.load(result.directory / "checkpoints" / "last.pt", weights_only=False)
    # The iteration counter (feature-distillation delay) is checkpointed and counted every step.
    assert int(state["regularizers"]["s2sd"]["iteration"]) == state["step"] > 0
    assert "heads.3.net.2.weight" in state["regularizers"]["s2sd"]  # the recipe's four target heads
    # Only the base head is part of the evaluated model.
    assert not any("s2sd" in key or key.startswith("heads.") for key in state["model"])
    assert tuple(state["model"]["head.fc.weight"].shape) == (32, 512)


def test_cub_s2sd_recipe_validates_with_the_reference_settings():
    proc = run_cli("validate", ROOT / "recipes" / "cub_s2sd.toml", env={"DMLPLUG_DATA": "/nonexistent"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from tests.shared.recipes import load_recipe

    recipe = load_recipe(ROOT / "recipes" / "cub_s2sd.toml", environ={"DMLPLUG_DATA": "/data"})
    params = recipe.components["regularizers[0]"].params
    assert params.target_dims == [512, 1024, 1536, 2048]
    assert (params.temperature, params.distill_weight, params.feature_weight) == (1.0, 50.0, 50.0)
    assert params.feature_distill and params.pool_aggr and params.feature_delay == 1000
    assert recipe.components["loss"].options.weight == 0.5 and params.target_weight == 0.5
