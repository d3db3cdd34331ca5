"""Without the ``tune`` extra, the commands built on Optuna say what to install, write nothing, show no traceback."""

import subprocess
import sys

import pytest
from tiny import write_tiny

# The CLI in a process where these modules cannot be imported (a None entry in sys.modules blocks an import).
BLOCKED = "import sys; {blocks}; from dmlplug.cli import main; main(sys.argv[1:])"


def dmlplug_without(modules, *args):
    blocks = "; ".join(f"sys.modules[{m!r}] = None" for m in modules)
    return subprocess.run([sys.executable, "-c", BLOCKED.format(blocks=blocks), *map(str, args)],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command", [
    ["tune", "run", "SPACE", "--dir", "OUT"],
    ["sweep", "run", "RECIPE", "--dir", "OUT", "--grid", "optimizer.lr=0.001,0.01"],
    ["oodml", "run", "RECIPE", "--splits", "SPLITS", "--out", "OUT", "--worker"]])
def test_a_missing_optuna_is_one_clear_error(tmp_path, command):
    space = write_tiny(tmp_path)
    out = tmp_path / "out"
    args = [{"SPACE": space, "RECIPE": space.parent / "recipe.toml", "OUT": out,
             "SPLITS": tmp_path / "splits.json"}.get(a, a) for a in command]
    result = dmlplug_without(["optuna"], *args)
    assert result.returncode != 0
    assert "needs optuna, which is not installed" in result.stderr
    assert "fix:   pip install 'dmlplug[tune]'" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()


def test_a_postgresql_storage_without_its_driver_is_one_clear_error(tmp_path):
    space = write_tiny(tmp_path)
    result = dmlplug_without(["psycopg"], "tune", "run", space, "--dir", tmp_path / "out",
                             "--storage", "postgresql://user:pw@127.0.0.1:1/db")
    assert result.returncode != 0 and "needs psycopg, which is not installed" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()
