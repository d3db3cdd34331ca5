"""`import dmlplug`, the plugin host and CLI start-up stay light (fast --help and validate: docs/performance.md).

What makes start-up fast is structure, checked here in fresh interpreters, never timed: which modules a step
imports, which pydantic validators and models it makes, which commands typer has to convert.
"""

import subprocess
import sys
from pathlib import Path


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


#: What the host, ``--help`` and ``validate`` of a recipe need none of (numpy alone costs ~0.1 s to import).
HEAVY = {"torch", "torchvision", "timm", "pytorch_metric_learning", "faiss", "numpy", "PIL"}


def test_loading_the_host_imports_nothing_heavy_and_makes_models_on_first_read():
    code = """
import dmlplug.plugins
from dmlplug.params import Params
from dmlplug_builtins.pml.introspect import PmlParams


def every(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from every(sub)


host = dmlplug.plugins.get_host()
print("complete", *[c.__name__ for c in every(Params) if c.__pydantic_complete__])
print("pml_before", *[c.__name__ for c in every(PmlParams)])
host.registry.get("losses", "arcface").params
print("pml_after", *[c.__name__ for c in every(PmlParams)])
"""
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    lines = {line.split()[0]: line.split()[1:] for line in out if line.startswith(("complete", "pml_"))}
    assert not HEAVY & set(out), HEAVY & set(out)
    assert not {"typer", "rich"} & {m.split(".")[0] for m in out}, "the host loads no command-line package"
    assert lines["complete"] == [], "a validator was built at load: Params models build them on first validation"
    assert "ArcfaceLossParams" not in lines["pml_before"] and "ArcfaceLossParams" in lines["pml_after"]


def test_help_and_validate_import_nothing_heavy():
    for args in (["--help"], ["validate", str(Path(__file__).parents[2] / "recipes" / "quickstart.toml")]):
        code = (f"import sys\nfrom dmlplug.cli import main\nsys.argv = ['dmlplug', *{args!r}]\n"
                "try:\n    main()\nexcept SystemExit as stop:\n    assert not stop.code, stop.code\n"
                "print('MODULES', *sys.modules)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        modules = set(out.rpartition("MODULES")[2].split())
        assert "sys" in modules and not HEAVY & modules, (args, HEAVY & modules)


def test_the_app_holds_only_the_command_about_to_run():
    from typer.main import get_command

    from dmlplug.cli import build_app

    assert list(get_command(build_app("validate")).commands) == ["validate"]
    assert list(get_command(build_app("tune")).commands) == ["tune"]  # a command group
    assert {"validate", "list", "tune", "data"} <= set(get_command(build_app("valdate")).commands)
