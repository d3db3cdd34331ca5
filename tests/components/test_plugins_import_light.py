"""Loading the built-in plugins stays light: every concern's ``__init__`` imports torch / PML in factories only."""

from __future__ import annotations

import subprocess
import sys


def test_loading_the_plugins_does_not_import_torch():
    code = ("import sys; from dmlplug.plugins import PluginHost; PluginHost().load(entry_points=False); "
            "mods = [m for m in ('torch', 'pytorch_metric_learning', 'numpy') if m in sys.modules]; print(mods)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "torch" not in out and "pytorch_metric_learning" not in out
