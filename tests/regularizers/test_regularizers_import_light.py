"""Loading the regularizers plugin must not import torch (factories import it when they run)."""

import subprocess
import sys


def test_plugin_module_does_not_import_torch():
    code = ("import sys, dmlplug_builtins.regularizers as r; "
            "assert callable(r.register_regularizers); "
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
