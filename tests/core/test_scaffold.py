"""`dmlplug plugin new`: the generated distribution passes its own tests, installs and registers its loss."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from e2e import run_cli

from dmlplug.errors import DmlplugError
from dmlplug.scaffold import new_plugin, plugin_names


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    parent = tmp_path_factory.mktemp("scaffold")
    proc = run_cli("plugin", "new", "my-loss", "--out", parent)
    assert proc.returncode == 0, proc.stderr
    assert "dmlplug_my_loss" in proc.stdout
    return parent / "dmlplug-my-loss"


def test_layout_and_entry_point(generated):
    import tomllib

    files = sorted(p.relative_to(generated).as_posix() for p in generated.rglob("*") if p.is_file())
    assert files == ["README.md", "dmlplug_my_loss/__init__.py", "dmlplug_my_loss/loss.py", "pyproject.toml",
                     "tests/test_my_loss.py"]
    # the hooks module stays torch-free; the loss class is module-level beside it (the built-in layout)
    init = (generated / "dmlplug_my_loss" / "__init__.py").read_text()
    assert "import torch" not in init and "from dmlplug_my_loss.loss import MyLossLoss" in init
    assert "\nclass MyLossLoss(torch.nn.Module):" in (generated / "dmlplug_my_loss" / "loss.py").read_text()
    project = tomllib.loads((generated / "pyproject.toml").read_text())
    assert project["project"]["name"] == "dmlplug-my-loss"
    assert project["project"]["entry-points"]["dmlplug"] == {"dmlplug_my_loss": "dmlplug_my_loss"}
    assert not [p for p in generated.parent.iterdir() if p.name.startswith(".dmlplug-new-")]


@pytest.mark.slow
def test_generated_tests_pass_as_generated(generated):
    # Not installed, not on PYTHONPATH: the generated pyproject puts the project on pytest's path.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "dmlplug-my-loss/tests"],
                          cwd=generated.parent,
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 passed" in proc.stdout


def test_generated_code_passes_ruff(generated):
    from pathlib import Path

    config = Path(__file__).resolve().parents[2] / "pyproject.toml"
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--config", str(config), "--no-cache", "."],
                          cwd=generated, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# Installing the generated distribution and finding it through its entry point: tests/core/test_docs.py
# (test_tutorial_commands_run follows the tutorial, which does exactly that).


@pytest.mark.parametrize("given", ["my-loss", "my_loss", "dmlplug-my-loss", "dmlplug_my_loss", "dmlplug-my_loss"])
def test_the_prefix_is_never_doubled(given):
    assert plugin_names(given) == {"dist": "dmlplug-my-loss", "module": "dmlplug_my_loss", "module_short": "my_loss",
                                   "loss": "my_loss_contrastive", "camel": "MyLoss"}


def test_a_prefixed_name_on_the_command_line(tmp_path):
    proc = run_cli("plugin", "new", "dmlplug-foo", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dmlplug-foo"]
    assert (tmp_path / "dmlplug-foo" / "dmlplug_foo" / "__init__.py").is_file()
    assert "package dmlplug_foo, loss 'foo_contrastive'" in proc.stdout


def test_names_and_errors(tmp_path):
    assert plugin_names("my_loss") == plugin_names("my-loss")
    assert plugin_names("arc2")["camel"] == "Arc2"
    for bad in ("My-Loss", "2loss", "a--b", "x.y", "", "dmlplug", "dmlplug-", "Dmlplug-x"):
        with pytest.raises(DmlplugError, match="invalid plugin name"):
            new_plugin(bad, tmp_path)
    new_plugin("dup", tmp_path)
    with pytest.raises(DmlplugError, match="already exists"):
        new_plugin("dup", tmp_path)
    proc = run_cli("plugin", "new", "Bad Name", "--out", tmp_path)
    assert proc.returncode == 2 and "invalid plugin name" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dmlplug-dup"]
