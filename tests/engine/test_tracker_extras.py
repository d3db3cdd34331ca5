"""An experiment tracker's logger whose package is absent is a validation error that names the extra to install."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib

import pytest
from e2e import TINY_RECIPE

from dmlplug.errors import RecipeError

# Each tracker's [[loggers]] table, valid but for the missing package (W&B needs a project to get that far).
TRACKERS = {"mlflow": '[[loggers]]\nname = "mlflow"\n', "wandb": '[[loggers]]\nname = "wandb"\nproject = "p"\n'}


@pytest.mark.parametrize("package", sorted(TRACKERS))
def test_a_missing_tracker_package_fails_at_validation(monkeypatch, package):
    import dmlplug

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    with pytest.raises(RecipeError) as info:
        dmlplug.validate(tomllib.loads(TINY_RECIPE + TRACKERS[package]))
    message = info.value.render()
    assert "loggers[1]" in message and "not installed" in message and f'pip install "dmlplug[{package}]"' in message


@pytest.mark.parametrize("package", sorted(TRACKERS))
def test_a_missing_tracker_package_fails_dmlplug_validate_without_traceback(tmp_path, package):
    recipe = tmp_path / "tracked.toml"
    recipe.write_text(TINY_RECIPE + TRACKERS[package])
    # sys.modules[package] = None: importlib.util.find_spec(package) is None, as when it is not installed.
    code = f"import sys; sys.modules[{package!r}] = None; from dmlplug.cli import main; main(sys.argv[1:])"
    proc = subprocess.run([sys.executable, "-c", code, "validate", str(recipe)], capture_output=True, text=True,
                          timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out
    assert f"dmlplug[{package}]" in out and "not installed" in out
