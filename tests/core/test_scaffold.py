"""`dmlplug plugin new`: for every kind, the generated distribution passes its own tests and ruff, and registers
its component; its contract test survives a second component."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from e2e import run_cli

from dmlplug.errors import DmlplugError
from dmlplug.protocols.kinds import KINDS
from dmlplug.scaffold import TEMPLATES, new_plugin, plugin_names


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


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory):
    """One generated distribution per kind (``dmlplug-k-<kind>``), in one folder."""
    parent = tmp_path_factory.mktemp("kinds")
    for kind in TEMPLATES:
        new_plugin(f"k-{kind.replace('_', '-')}", parent, kind)
    return parent


def test_there_is_a_template_for_every_kind():
    assert sorted(TEMPLATES) == sorted(KINDS)


@pytest.mark.slow
def test_every_kinds_generated_tests_pass_as_generated_and_after_a_second_component(every_kind):
    # A second component in one of them: the generated contract test asks for its own among those checked.
    init = every_kind / "dmlplug-k-miners" / "dmlplug_k_miners" / "__init__.py"
    init.write_text(init.read_text() + '''

@hookimpl(specname="register_miners")
def register_a_second_miner(register: Register) -> None:
    """A second miner, as an author adds one."""
    register("k_miners_strict_pairs", build_k_miners, params=KMinersParams, tags=("pairs",),
             description="The same miner under a second name.")
''')
    # Not installed, not on PYTHONPATH by their own pyproject here: one pytest process runs them all.
    dists = sorted(p for p in every_kind.iterdir() if p.is_dir())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(d) for d in dists)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
                           *(str(d / "tests") for d in dists)], cwd=every_kind, capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    counts = {kind: len(list((every_kind / f"dmlplug-k-{kind.replace('_', '-')}" / "tests").glob("test_*.py")))
              for kind in TEMPLATES}
    assert set(counts.values()) == {1} and " passed" in proc.stdout and "failed" not in proc.stdout


def test_every_kinds_generated_code_passes_ruff(every_kind):
    from pathlib import Path

    config = Path(__file__).resolve().parents[2] / "pyproject.toml"
    for dist in sorted(p for p in every_kind.iterdir() if p.is_dir()):
        proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--config", str(config), "--no-cache", "."],
                              cwd=dist, capture_output=True, text=True)
        assert proc.returncode == 0, dist.name + ": " + proc.stdout + proc.stderr


def test_an_unknown_kind_is_refused_with_the_kinds(tmp_path):
    proc = run_cli("plugin", "new", "x", "--kind", "reranker2", "--out", tmp_path)
    assert proc.returncode != 0 and "no plugin template for kind 'reranker2'" in proc.stderr
    assert "did you mean" in proc.stderr and not list(tmp_path.iterdir())


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
