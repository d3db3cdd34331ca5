"""Every hookspec has a test in tests/hooks marked ``@pytest.mark.hook("<hook>")`` (as datasette's test_docs)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from dmlplug import hookspecs

HERE = Path(__file__).parent


def hookspec_names() -> list[str]:
    return [name for name, func in inspect.getmembers(hookspecs, inspect.isfunction) if hasattr(func, "dmlplug_spec")]


def _is_hook_mark(node: ast.expr) -> bool:
    # pytest.mark.hook
    return (isinstance(node, ast.Attribute) and node.attr == "hook" and isinstance(node.value, ast.Attribute)
            and node.value.attr == "mark" and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "pytest")


def marked_tests(folder: Path = HERE) -> dict[str, list[str]]:
    """Hook name -> ``file::test`` of the test functions whose decorators include ``pytest.mark.hook(name)``."""
    found: dict[str, list[str]] = {}
    for path in sorted(folder.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test"):
                continue
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and _is_hook_mark(decorator.func):
                    for arg in decorator.args:
                        found.setdefault(arg.value, []).append(f"{path.name}::{node.name}")
    return found


def test_the_hook_marks_are_read():
    found = marked_tests()
    assert "test_on_step_end" in str(found.get("on_step_end")), found


@pytest.mark.parametrize("hook", hookspec_names())
def test_every_hookspec_has_a_marked_test(hook):
    assert marked_tests().get(hook), (f"no test in tests/hooks is marked @pytest.mark.hook({hook!r}): add one that "
                                      f"implements {hook} in a throwaway plugin and checks its arguments")


def test_every_hook_mark_names_a_hookspec():
    unknown = sorted(set(marked_tests()) - set(hookspec_names()))
    assert not unknown, f"tests marked with hooks that do not exist: {unknown}"


def test_there_are_twenty_eight_hooks():
    # A new hook fails here first: add its test in tests/hooks, then change the count.
    assert len(hookspec_names()) == 28
