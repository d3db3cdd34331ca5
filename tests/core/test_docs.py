"""Docs that are generated or quoted must match the code."""

import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_hook_is_documented_with_an_example():
    from dmlplug import hookspecs

    hooks = [f for _, f in inspect.getmembers(hookspecs, inspect.isfunction) if hasattr(f, "dmlplug_spec")]
    assert len(hooks) == 16
    for func in hooks:
        doc = func.__doc__ or ""
        assert "Args:" in doc and "Example::" in doc, f"{func.__name__} lacks Args/Example in its docstring"


GENERATED = [("generate_hooks", "hooks.md"), ("generate_recipes", "recipes.md")]


@pytest.mark.parametrize(("generator", "document"), GENERATED)
def test_generated_reference_is_fresh(generator, document):
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        module = importlib.import_module(generator)
    finally:
        sys.path.pop(0)
    assert (ROOT / "docs" / document).read_text() == module.render(), (
        f"docs/{document} is stale: run `python docs/{generator}.py`")


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    test_command = next(b.strip() for b in blocks if "pytest" in b)
    assert test_command in ci


def test_readme_install_command_runs_the_quickstart():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    assert any("pip install" in b and "dmlplug run recipes/quickstart.toml" in b for b in blocks)


def test_all_packages_on_disk_are_packaged():
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = set()
    for top, logical in (("dmlplug", "dmlplug"), ("plugins", "dmlplug_builtins")):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            on_disk.add(".".join([logical, *rel.parts]))
    assert on_disk <= listed, f"add to pyproject [tool.setuptools] packages: {sorted(on_disk - listed)}"


def test_cli_help_lists_core_commands():
    out = subprocess.run([sys.executable, "-m", "dmlplug", "--help"], capture_output=True, text=True, check=True)
    for command in ("run", "validate", "plugins", "list"):
        assert command in out.stdout
