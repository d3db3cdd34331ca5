"""No import cycles among dmlplug's modules (issue #37), read with :mod:`ast`: imports at module level and
inside functions. ``if TYPE_CHECKING:`` blocks are left out: they never run, and annotations may name each other.
``from pkg import name`` counts as an import of ``pkg.name`` when that is a module, else of ``pkg``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

def _modules() -> dict[str, Path]:
    found = {}
    for path in (ROOT / "dmlplug").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(tree: ast.AST, package: str, modules: dict[str, Path]) -> list[str]:
    names: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.extend(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _edges() -> dict[str, set[str]]:
    modules = _modules()
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for target in _imported(ast.parse(path.read_text(encoding="utf-8")), package, modules):
            while target.startswith("dmlplug") and target not in modules:
                target = target.rpartition(".")[0]
            if target.startswith("dmlplug") and target != name:
                edges[name].add(target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> set[frozenset[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return found


def test_the_host_has_no_import_cycles():
    cycles = sorted(sorted(c) for c in _cycles(_edges()))
    assert not cycles, f"import cycles among dmlplug's modules: {cycles}"


def test_the_cycle_finder_finds_a_planted_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == {frozenset({"a", "b", "c"})}
