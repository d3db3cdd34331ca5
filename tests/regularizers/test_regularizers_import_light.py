"""Loading a regularizer plugin package must not import torch (factories import it when they run)."""

import subprocess
import sys

import pytest

PACKAGES = ("tcm", "nir", "diva", "s2sd")


@pytest.mark.parametrize("package", PACKAGES)
def test_plugin_package_does_not_import_torch(package):
    code = (f"import sys, dmlplug_builtins.{package} as r; "
            "assert callable(r.register_regularizers); "
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_every_package_is_a_default_plugin_and_registers_its_regularizer():
    from dmlplug.plugins import DEFAULT_PLUGINS, PluginHost

    assert {f"dmlplug_builtins.{p}" for p in PACKAGES} <= set(DEFAULT_PLUGINS)
    registry = PluginHost().load(entry_points=False).registry
    for package in PACKAGES:
        assert registry.get("regularizers", package).plugin == package
