"""The static type checker passes over dmlplug/, plugins/ (as dmlplug_builtins) and examples/.

mypy reads its whole configuration ([tool.mypy] in pyproject.toml: which files, which modules are strict) and
keeps its incremental cache in .mypy_cache/ at the repository root, shared with a plain `mypy` run there.
"""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_reports_no_errors():
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")],
                            cwd=ROOT, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        pytest.fail(f"mypy failed (exit {result.returncode}):\n{result.stdout}{result.stderr}", pytrace=False)
