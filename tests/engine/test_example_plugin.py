"""The third-party path: a separate pip-installable distribution registers a loss through entry points."""

import json
import subprocess
import sys

from e2e import ROOT, TINY_RECIPE, run_cli


def test_example_plugin_installs_lists_and_trains(tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(ROOT / "examples" / "dmlplug-example-loss")],
        check=True, capture_output=True, text=True,
    )
    env = {"PYTHONPATH": str(target)}
    plugins = run_cli("plugins", "--json", env=env)
    assert plugins.returncode == 0, plugins.stderr
    record = next(p for p in json.loads(plugins.stdout) if p["name"] == "example_loss")
    assert record["distribution"] == "dmlplug-example-loss" and record["version"] == "0.1.0"
    assert record["hooks"] == ["register_losses"] and record["error"] is None
    listed = run_cli("list", "losses", env=env)
    assert "example_cosine_contrastive" in listed.stdout and "(example_loss)" in listed.stdout
    recipe = tmp_path / "example.toml"
    recipe.write_text(TINY_RECIPE.replace('name = "multi_similarity"', 'name = "example_cosine_contrastive"'))
    proc = run_cli("run", recipe, "--out", tmp_path / "run", "--quiet", env=env)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "completed" and results["metrics"]["recall@1"] > 0
