"""The third-party path: separate pip-installable distributions register components through entry points.

``examples/dmlplug-example-loss`` registers a loss; ``examples/dmlplug-example-regularizer`` a regularizer that
uses the engine services (own optimizer group, ``after_optimizer_step``, checkpointed buffers) and a logger that
draws it at every evaluation, with the public API only.
"""

import importlib
import json
import subprocess
import sys

import pytest
import torch
from e2e import ROOT, TINY_RECIPE, SigtermAtStep, run_cli
from test_resume import SMALL, _metrics_lines, _tensors_equal

from dmlplug.step import StepOutput

EXAMPLES = ROOT / "examples"
REGULARIZER_RECIPE = TINY_RECIPE + """
[[regularizers]]
name = "example_centre_bank"
weight = 0.5
lr_mult = 10.0

[[loggers]]
name = "example_centre_figure"
"""
FIGURE = "figures/centre_bank_regularizers_0.png"


def pip_install(example, target):
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(EXAMPLES / example)],
        check=True, capture_output=True, text=True,
    )
    return target


def test_example_plugin_installs_lists_and_trains(tmp_path):
    target = pip_install("dmlplug-example-loss", tmp_path / "site")
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


# ------------------------------------------------------------------------------------------------- the regularizer


@pytest.fixture(scope="module")
def regularizer_site(tmp_path_factory):
    """dmlplug-example-regularizer installed into a private folder (for PYTHONPATH)."""
    return pip_install("dmlplug-example-regularizer", tmp_path_factory.mktemp("regularizer") / "site")


@pytest.fixture
def from_site(regularizer_site, monkeypatch):
    """Make the installed distribution importable, and findable as an entry point, in this process."""
    monkeypatch.syspath_prepend(str(regularizer_site))
    importlib.invalidate_caches()
    return regularizer_site


def test_centre_bank_maths(from_site):
    """Known answer: two classes, centres set by the first update, then one EMA step."""
    from dmlplug_example_regularizer.centre_bank import CentreBank

    bank = CentreBank(3, 2, momentum=0.5, temperature=1.0)
    e = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    y = torch.tensor([0, 1, 1])
    first = bank(StepOutput(embeddings=e, labels=y))
    assert first["pull"].item() == 0.0 and first["contrast"].item() == 0.0  # no centre yet
    bank.after_optimizer_step(StepOutput(embeddings=e, labels=y))
    assert torch.allclose(bank.centres, torch.tensor([[1.0, 0.0], [0.3, 0.9], [0.0, 0.0]]))
    assert bank.counts.tolist() == [1, 1, 0] and int(bank.updates) == 1
    terms = bank(StepOutput(embeddings=e, labels=y))
    d = torch.cdist(e, bank.centres[:2]) ** 2
    assert torch.allclose(terms["pull"], (d[0, 0] + d[1, 1] + d[2, 1]) / 3)
    assert torch.allclose(terms["contrast"], torch.nn.functional.cross_entropy(-d, y))
    terms["contrast"].backward()
    assert bank.log_temperature.grad is not None and float(bank.log_temperature.grad) != 0
    bank.after_optimizer_step(StepOutput(embeddings=e[:1] * -1, labels=y[:1]))  # c0 = 0.5·c0 + 0.5·(−1, 0)
    assert torch.allclose(bank.centres[0], torch.tensor([0.0, 0.0])) and bank.counts.tolist() == [2, 1, 0]
    (group,) = bank.optimizer_param_groups()
    assert group["name"] == "example_centre_bank" and group["params"] == [bank.log_temperature]
    assert group["lr_mult"] == 10.0 and group["weight_decay"] == 0.0


def test_centre_bank_passes_the_plugin_kit(from_site):
    from dmlplug.testing import check_plugin

    assert check_plugin("dmlplug_example_regularizer") == [("regularizers", "example_centre_bank"),
                                                           ("loggers", "example_centre_figure")]


def test_example_regularizer_trains_and_resumes_exactly(regularizer_site, from_site, tmp_path):
    env = {"PYTHONPATH": str(regularizer_site)}
    plugins = run_cli("plugins", "--json", env=env)
    assert plugins.returncode == 0, plugins.stderr
    record = next(p for p in json.loads(plugins.stdout) if p["name"] == "example_regularizer")
    assert (record["distribution"], record["version"], record["error"]) == ("dmlplug-example-regularizer", "0.1.0",
                                                                            None)
    assert record["hooks"] == ["register_loggers", "register_regularizers"]
    listed = run_cli("list", "regularizers", env=env)
    assert "example_centre_bank" in listed.stdout and "(example_regularizer)" in listed.stdout

    recipe = tmp_path / "centre.toml"
    recipe.write_text(REGULARIZER_RECIPE)
    full, killed = tmp_path / "full", tmp_path / "killed"
    overrides = [arg for pair in SMALL for arg in ("--set", pair)]
    proc = run_cli("run", recipe, "--out", full, "--quiet", *overrides, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((full / "results.json").read_text())["status"] == "completed"
    assert (full / FIGURE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # The same run in this process, from the entry point, stopped by SIGTERM in the middle of epoch 2 ...
    from dmlplug.engine.launch import run_recipe
    from dmlplug.engine.resume import RunInterrupted
    from dmlplug.plugins import PluginHost

    host = PluginHost().load()
    assert host.records["example_regularizer"].error is None
    stopper = SigtermAtStep(6)
    host.pm.register(stopper, "sigterm-at-6")
    with pytest.raises(RunInterrupted, match="SIGTERM at step 6"):
        run_recipe(recipe, SMALL, out=killed, quiet=True, host=host)
    host.pm.unregister(stopper)
    state = torch.load(killed / "checkpoints" / "last.pt", weights_only=False)
    assert (state["epoch"], state["step"], state["epoch_complete"]) == (2, 6, False)
    assert int(state["regularizers"]["example_centre_bank"]["updates"]) == 6

    # ... then resumed: it ends exactly as the uninterrupted run.
    assert run_recipe(killed, resume=True, quiet=True, host=host).status == "completed"
    a = torch.load(full / "checkpoints" / "last.pt", weights_only=False)
    b = torch.load(killed / "checkpoints" / "last.pt", weights_only=False)
    for key in ("model", "optimizer", "scheduler", "loss", "regularizers", "best", "epoch", "step", "last_metrics"):
        _tensors_equal(a[key], b[key], key)
    bank = b["regularizers"]["example_centre_bank"]
    assert int(bank["updates"]) == 8 and int((bank["counts"] > 0).sum()) > 2 and bool(bank["centres"].abs().sum() > 0)
    assert float(bank["log_temperature"]) != pytest.approx(float(torch.tensor(0.1).log()))  # it trained
    groups = {g["name"]: g for g in b["optimizer"]["param_groups"]}
    assert groups["example_centre_bank"]["lr"] == pytest.approx(10 * 1e-3)
    assert groups["example_centre_bank"]["weight_decay"] == 0.0
    own = groups["example_centre_bank"]["params"]
    assert len(own) == 1 and int(b["optimizer"]["state"][own[0]]["step"]) == 8  # Adam state of the temperature
    assert json.loads((full / "results.json").read_text()) == json.loads((killed / "results.json").read_text())
    assert _metrics_lines(full) == _metrics_lines(killed)
    assert (killed / FIGURE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
