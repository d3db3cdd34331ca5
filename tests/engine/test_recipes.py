"""Every recipe in recipes/ validates; the embedded-dataset method recipes run end to end."""

import json

import pytest
from e2e import LEARNING_PROTOCOL, ROOT, assert_learns, run_cli

import dmlplug

RECIPES = sorted((ROOT / "recipes").glob("*.toml"))


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_every_recipe_validates(recipe, monkeypatch, tmp_path):
    monkeypatch.setenv("DMLPLUG_DATA", str(tmp_path))
    dmlplug.validate(recipe)


# Each recipe's overrides on top of the protocol. ArcFace + TCM at the recipe's lr 1e-3 gained only +0.098 in 45
# steps (seed 0); with a 3x backbone lr it gains +0.19 to +0.34 over seeds 0-2 (benchmarks/recipe_learning.py).
METHOD_OVERRIDES = {"glyphs_arcface_tcm": ["optimizer.lr=3e-3"], "glyphs_proxyanchor_nir": []}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["glyphs_arcface_tcm", "glyphs_proxyanchor_nir"])
def test_embedded_method_recipes_train_clearly_above_the_untrained_model(name, tmp_path):
    args = [a for s in [*LEARNING_PROTOCOL, *METHOD_OVERRIDES[name]] for a in ("--set", s)]
    proc = run_cli("run", ROOT / "recipes" / f"{name}.toml", "--out", tmp_path / "run", "--quiet", *args)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "completed"
    assert_learns(tmp_path / "run")  # by e2e.LEARNS_BY standard errors
    if name == "glyphs_arcface_tcm":
        assert "opis" in results["metrics"]


def test_headline_recipe_without_data_stops_at_once_and_says_where(tmp_path):
    proc = run_cli("run", ROOT / "recipes" / "sop_arcface_tcm.toml", cwd=tmp_path, env={"DMLPLUG_DATA": ""})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "Stanford_Online_Products" in proc.stderr and "DMLPLUG_DATA" in proc.stderr
    assert not (tmp_path / "runs").exists()
