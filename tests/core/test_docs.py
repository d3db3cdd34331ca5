"""Docs that are generated or quoted must match the code."""

import inspect
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_hook_is_documented_with_an_example():
    from dmlplug import hookspecs

    hooks = [f for _, f in inspect.getmembers(hookspecs, inspect.isfunction) if hasattr(f, "dmlplug_spec")]
    assert len(hooks) == 16
    for func in hooks:
        doc = func.__doc__ or ""
        assert "Args:" in doc and "Example::" in doc, f"{func.__name__} lacks Args/Example in its docstring"


def test_hooks_reference_is_fresh():
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import generate_hooks
    finally:
        sys.path.pop(0)
    assert (ROOT / "docs" / "hooks.md").read_text() == generate_hooks.render(), (
        "docs/hooks.md is stale: run `python docs/generate_hooks.py`")


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


def test_recipe_reference_is_fresh():
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import generate_recipes
    finally:
        sys.path.pop(0)
    assert (ROOT / "docs" / "recipes.md").read_text() == generate_recipes.render(), (
        "docs/recipes.md is stale: run `python docs/generate_recipes.py`")
