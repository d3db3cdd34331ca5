"""`import dmlplug` and CLI start-up must not import torch (fast --help and validate)."""

import subprocess
import sys


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_import_dmlplug_does_not_import_torch():
    modules = _modules_after("import dmlplug")
    assert "torch" not in modules
    assert "pytorch_metric_learning" not in modules


def test_cli_startup_and_plugin_loading_do_not_import_torch():
    modules = _modules_after("from dmlplug.cli import build_app\nbuild_app()")
    heavy = {"torch", "timm", "pytorch_metric_learning", "faiss", "torchvision"} & modules
    assert not heavy, f"plugin loading imported {heavy}: move those imports into factory bodies"
