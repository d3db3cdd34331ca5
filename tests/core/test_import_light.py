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


def test_run_refuses_a_bad_recipe_before_importing_torch(tmp_path):
    # `dmlplug run` validates before it loads the engine: a typo costs half a second, not torch's start-up.
    recipe = tmp_path / "bad.toml"
    recipe.write_text('[run]\nname = "bad"\nepoch = 1\n')
    code = ("import sys\nfrom dmlplug.cli import main\n"
            f"sys.argv = ['dmlplug', 'run', {str(recipe)!r}, '--out', {str(tmp_path / 'out')!r}]\n"
            "try:\n    main()\nexcept SystemExit as stop:\n    assert stop.code == 2, stop.code\n"
            "print('\\n'.join(sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "run.epoch" in out.stderr
    assert "torch" not in set(out.stdout.split())
    assert not (tmp_path / "out").exists()
