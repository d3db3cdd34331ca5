"""Every recipe in recipes/ validates; the embedded-dataset method recipes run end to end."""

import json

import pytest
from e2e import ROOT, run_cli

import dmlplug

RECIPES = sorted((ROOT / "recipes").glob("*.toml"))


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_every_recipe_validates(recipe, monkeypatch, tmp_path):
    monkeypatch.setenv("DMLPLUG_DATA", str(tmp_path))
    dmlplug.validate(recipe)


SHORT = ["run.epochs=1", "data.dataset.num_classes=60", "data.dataset.images_per_class=12", "evaluation.every=1"]


@pytest.mark.parametrize("name", ["glyphs_arcface_tcm", "glyphs_proxyanchor_nir"])
def test_embedded_method_recipes_run(name, tmp_path):
    args = [a for s in SHORT for a in ("--set", s)]
    proc = run_cli("run", ROOT / "recipes" / f"{name}.toml", "--out", tmp_path / "run", "--quiet", *args)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "completed" and results["metrics"]["recall@1"] > 0
    if name == "glyphs_arcface_tcm":
        assert "opis" in results["metrics"]


def test_headline_recipe_without_data_stops_at_once_and_says_where(tmp_path):
    proc = run_cli("run", ROOT / "recipes" / "sop_arcface_tcm.toml", cwd=tmp_path, env={"DMLPLUG_DATA": ""})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "Stanford_Online_Products" in proc.stderr and "DMLPLUG_DATA" in proc.stderr
    assert not (tmp_path / "runs").exists()
