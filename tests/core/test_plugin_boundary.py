"""The boundary between host and plugins (docs/plugin-api.md, ARCHITECTURE §2b).

* Plugins (every ``.py`` under ``plugins/``, shipped as ``dmlplug_builtins``) import from ``dmlplug`` only the
  modules in :data:`PUBLIC_MODULES`, and never a ``_private`` name or module outside their own concern
  package (``plugins/<concern>/`` or ``plugins/<concern>.py``).
* The host (every ``.py`` under ``dmlplug/``) never imports ``dmlplug_builtins``: only the strings of
  ``dmlplug.plugins.DEFAULT_PLUGINS`` name the built-ins.
* :data:`PUBLIC_MODULES` is the one list: docs/plugin-api.md's "Public modules" table must list exactly these
  modules, and its "What is private" list every other module of the host.

Imports are read with :mod:`ast`, wherever they are (inside functions, under ``TYPE_CHECKING``), together with
``importlib.import_module("literal")`` calls.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "plugin-api.md"

#: The public API: modules a plugin may import. ``"pkg.*"`` stands for the package and all its sub-modules.
#: docs/plugin-api.md's "Public modules" table lists exactly these (``test_doc_lists_exactly_the_public_modules``).
PUBLIC_MODULES: tuple[str, ...] = (
    "dmlplug",
    "dmlplug.params",
    "dmlplug.tables",
    "dmlplug.errors",
    "dmlplug.context",
    "dmlplug.protocols",
    "dmlplug.hookspecs",
    "dmlplug.needs",
    "dmlplug.step",
    "dmlplug.data",
    "dmlplug.data.image_files",
    "dmlplug.data.splits",
    "dmlplug.data.transforms",
    "dmlplug.data.image_ops",
    "dmlplug.data.download",
    "dmlplug.evaluation.*",
    "dmlplug.files",
    "dmlplug.bundle.errors",
    "dmlplug.bundle.api",
    "dmlplug.secrets",
    "dmlplug.checkpoints",
    "dmlplug.devices",
    "dmlplug.proxies",
    "dmlplug.testing",
)

HOST, BUILTINS = "dmlplug", "dmlplug_builtins"


def is_public(module: str) -> bool:
    """Whether a plugin may import ``module`` (a ``dmlplug`` module name)."""
    for entry in PUBLIC_MODULES:
        if entry.endswith(".*"):
            package = entry[:-2]
            if module == package or module.startswith(package + "."):
                return True
        elif module == entry:
            return True
    return False


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _host_module_exists(module: str) -> bool:
    """Whether ``module`` (``dmlplug.x.y``) is a module or package of the host on disk."""
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


# ------------------------------------------------------------------------------------------------- the checker


@dataclass(frozen=True)
class Import:
    """One import statement: ``module`` (absolute) and the names taken from it (empty for ``import module``)."""

    line: int
    module: str
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Violation:
    """A broken boundary rule, shown as ``path:line: message``."""

    where: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.where}:{self.line}: {self.message}"


def _resolve(module: str | None, level: int, importer: str, is_package: bool) -> str:
    """The absolute module of ``from <level dots><module> import ...`` written in ``importer``."""
    if level == 0:
        return module or ""
    parts = importer.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, module] if module else base)


def imports(source: str, importer: str, is_package: bool = False) -> Iterator[Import]:
    """Every import in ``source`` (module ``importer``), nested ones and ``importlib.import_module("x")`` included."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(node.module, node.level, importer, is_package)
            yield Import(node.lineno, module, tuple(alias.name for alias in node.names))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__"):
                yield Import(node.lineno, node.args[0].value)


def concern_package(importer: str) -> str:
    """``dmlplug_builtins.<concern>``: the package (or top-level module) a built-in module belongs to."""
    parts = importer.split(".")
    return ".".join(parts[:2])


def plugin_violations(source: str, importer: str, where: str, is_package: bool = False,
                      own: str | None = None) -> list[Violation]:
    """What a plugin module ``importer`` (``dmlplug_builtins.x.y``) imports that it must not.

    ``own`` is the package whose private names the module may use (default: its concern package).
    """
    own = own or concern_package(importer)
    found = []
    for imp in imports(source, importer, is_package):
        modules = [imp.module]
        if _under(imp.module, HOST):  # `from dmlplug import engine` imports the module dmlplug.engine
            modules += [f"{imp.module}.{n}" for n in imp.names if _host_module_exists(f"{imp.module}.{n}")]
        for module in modules:
            if _under(module, HOST) and not is_public(module):
                found.append(Violation(where, imp.line, f"imports the private host module {module!r} "
                                                        "(public modules: docs/plugin-api.md)"))
        if _under(imp.module, own):
            continue
        private_parts = [p for p in imp.module.split(".") if _is_private(p)]
        if private_parts:
            found.append(Violation(where, imp.line, f"imports from the private module {imp.module!r} "
                                                    f"outside its own package {own!r}"))
        for name in imp.names:
            if _is_private(name):
                found.append(Violation(where, imp.line, f"imports the private name {name!r} from {imp.module!r} "
                                                        f"outside its own package {own!r}"))
    return found


def host_violations(source: str, importer: str, where: str, is_package: bool = False) -> list[Violation]:
    """Imports of the built-in plugins by a host module (strings naming them are fine)."""
    return [Violation(where, imp.line, f"the host imports the built-in plugin module {imp.module!r}")
            for imp in imports(source, importer, is_package) if _under(imp.module, BUILTINS)]


def _modules(folder: Path, package: str) -> Iterator[tuple[Path, str, bool]]:
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder).with_suffix("")
        parts = list(rel.parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        yield path, ".".join([package, *parts]), is_package


# ------------------------------------------------------------------------------------------------- the rules


def test_builtin_plugins_import_only_the_public_api():
    found = []
    files = list(_modules(ROOT / "plugins", BUILTINS))
    assert len(files) > 10
    for path, module, is_package in files:
        found += plugin_violations(path.read_text(), module, str(path.relative_to(ROOT)), is_package)
    assert not found, "plugins reach past the public API:\n" + "\n".join(map(str, found))


def test_example_distributions_import_only_the_public_api():
    """The third-party examples prove the API is enough: they follow the same rule."""
    found, packages = [], 0
    for init in sorted((ROOT / "examples").glob("*/*/__init__.py")):
        if init.parent.parent.name == "build":
            continue
        packages += 1
        package = init.parent.name
        for path, module, is_package in _modules(init.parent, package):
            found += plugin_violations(path.read_text(), module, str(path.relative_to(ROOT)), is_package, own=package)
    assert packages >= 3
    assert not found, "example plugins reach past the public API:\n" + "\n".join(map(str, found))


def test_studies_import_only_the_public_api():
    """The studies (studies/*.py) are user code: they use what any user or plugin may use."""
    found = []
    files = sorted((ROOT / "studies").glob("*.py"))
    assert files
    for path in files:
        found += plugin_violations(path.read_text(), path.stem, str(path.relative_to(ROOT)), False, own=path.stem)
    assert not found, "studies reach past the public API:\n" + "\n".join(map(str, found))


def test_the_host_never_imports_the_builtin_plugins():
    found = []
    for path, module, is_package in _modules(ROOT / "dmlplug", HOST):
        found += host_violations(path.read_text(), module, str(path.relative_to(ROOT)), is_package)
    assert not found, ("the host must not import dmlplug_builtins (name them only in DEFAULT_PLUGINS):\n"
                       + "\n".join(map(str, found)))


def test_every_public_module_exists():
    missing = [m.removesuffix(".*") for m in PUBLIC_MODULES if not _host_module_exists(m.removesuffix(".*"))]
    assert not missing, f"PUBLIC_MODULES names modules that do not exist: {missing}"


# ------------------------------------------------------------------------------------------------- the document


def doc_section(title: str) -> str:
    """The text of ``## <title>`` in docs/plugin-api.md, up to the next ``## `` heading."""
    text = DOC.read_text()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"docs/plugin-api.md has no section '## {title}'"
    return match.group(1)


def table_rows(text: str) -> list[list[str]]:
    """Cells of every Markdown table row in ``text`` (header and separator rows dropped)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if all(set(c) <= set("-: ") for c in cells):
            rows.pop()  # the row above the separator is the header
            continue
        rows.append(cells)
    return rows


def documented_public_modules() -> list[str]:
    """The modules of the "Public modules" table, ``pkg.*`` where the cell says "and its sub-modules"."""
    modules = []
    for cells in table_rows(doc_section("Public modules")):
        star = ".*" if "sub-modules" in cells[0] else ""
        modules += [name + star for name in re.findall(r"`(dmlplug[\w.]*)`", cells[0])]
    return modules


def documented_private_modules() -> list[str]:
    """The modules of the "What is private" list (bullets ``- `dmlplug.x`: ...``)."""
    return re.findall(r"^- `(dmlplug\.[\w.]+)`", doc_section("What is private"), flags=re.M)


def test_doc_lists_exactly_the_public_modules():
    documented = documented_public_modules()
    assert len(documented) == len(set(documented)), f"a module is listed twice: {documented}"
    assert set(documented) == set(PUBLIC_MODULES), (
        "docs/plugin-api.md's Public modules table and PUBLIC_MODULES differ: "
        f"only in the doc {sorted(set(documented) - set(PUBLIC_MODULES))}, "
        f"only in the test {sorted(set(PUBLIC_MODULES) - set(documented))}")


def test_every_host_module_is_public_or_documented_private():
    """A new module under dmlplug/ must be classified: in the public table, or in "What is private"."""
    private = documented_private_modules()
    public_listed = [p for p in private if is_public(p)]
    assert not public_listed, f"listed both public and private: {public_listed}"
    top_level = {f"{HOST}.{p.stem}" for p in (ROOT / HOST).glob("*.py") if not p.stem.startswith("__")}
    top_level |= {f"{HOST}.{p.parent.name}" for p in (ROOT / HOST).glob("*/__init__.py")}
    # A package is classified by its own entry, or by entries for its modules.
    unclassified = sorted(m for m in top_level if not is_public(m) and m not in private
                          and not any(p.startswith(m + ".") for p in [*private, *PUBLIC_MODULES]))
    assert not unclassified, (f"host modules neither public nor listed under 'What is private' in "
                              f"docs/plugin-api.md: {unclassified}")
    stale = [m for m in private if not _host_module_exists(m)]
    assert not stale, f"docs/plugin-api.md lists private modules that do not exist: {stale}"


# ------------------------------------------------------------------------------------------------- the checker itself


def _plugin(source: str, importer: str = "dmlplug_builtins.diva.terms", is_package: bool = False) -> list[str]:
    return [str(v) for v in plugin_violations(source, importer, "x.py", is_package)]


@pytest.mark.parametrize(("source", "line"), [
    ("from dmlplug.engine.build import x\n", 1),
    ("import dmlplug.plugins\n", 1),
    ("import torch\nimport dmlplug.recipe.loading as loading\n", 2),
    ("from dmlplug import engine\n", 1),
    ("from dmlplug import Params, registry\n", 1),
    ("def f():\n    if True:\n        from dmlplug.cli import main\n", 3),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dmlplug.report import Group\n", 3),
    ("import importlib\nhost = importlib.import_module('dmlplug.plugins')\n", 2),
    ("from dmlplug.files import _jsonable\n", 1),
    ("from dmlplug_builtins.revisiting_miners import _empty_triplets\n", 1),
    ("from .._shared import helper\n", 1),
    ("from torch.nn.modules import _functions\n", 1),
])
def test_the_checker_flags_what_plugins_must_not_import(source, line):
    found = _plugin(source)
    assert found, f"not flagged: {source!r}"
    assert found[0].startswith(f"x.py:{line}: "), found


def test_the_checker_names_file_line_and_module():
    assert _plugin("import torch\n\n\ndef f():\n    from dmlplug.engine.build import x\n") == [
        "x.py:5: imports the private host module 'dmlplug.engine.build' (public modules: docs/plugin-api.md)"]


@pytest.mark.parametrize("source", [
    "from __future__ import annotations\nimport torch\nfrom torch import nn\n",
    "from dmlplug import Params, hookimpl\nimport dmlplug\n",
    "from dmlplug.evaluation.runner import collect_figures\nfrom dmlplug.evaluation import EvalContext\n",
    "from dmlplug.files import atomic_write\nfrom dmlplug.data.image_files import FileImageSource\n",
    "from dmlplug.protocols import RunView\nfrom dmlplug.context import BuildContext\n",
    "from .terms import _decorrelation\nfrom dmlplug_builtins.diva.terms import _helper\n",
    "from . import _impl\n",
    "from dmlplug_builtins.loggers import require_package\n",
    "x = 'dmlplug.engine'\n",
])
def test_the_checker_accepts_the_public_api_and_own_private_names(source):
    assert _plugin(source) == []


def test_relative_imports_resolve_against_the_importing_module():
    assert _resolve("terms", 1, "dmlplug_builtins.diva.regularizer", False) == "dmlplug_builtins.diva.terms"
    assert _resolve("terms", 1, "dmlplug_builtins.diva", True) == "dmlplug_builtins.diva.terms"
    assert _resolve(None, 2, "dmlplug_builtins.diva.terms", False) == "dmlplug_builtins"
    assert _plugin("from .regularizer import _x\n", "dmlplug_builtins.diva", is_package=True) == []
    assert _plugin("from ..tcm import _x\n", "dmlplug_builtins.diva", is_package=True)


def test_the_host_checker_flags_imports_not_strings():
    strings = ('DEFAULT_PLUGINS = ("dmlplug_builtins.backbones",)\n'
               "import importlib\n"
               "def load(m):\n    return importlib.import_module(m)\n")
    assert host_violations(strings, "dmlplug.plugins", "p.py") == []
    lazy = "def f():\n    import importlib\n    return importlib.import_module('dmlplug_builtins.heads')\n"
    for source, line in [("from dmlplug_builtins.revisiting_margin import RevisitingMarginLoss\n", 1),
                         ("import os\nimport dmlplug_builtins.datasets\n", 2), (lazy, 3)]:
        found = host_violations(source, "dmlplug.oodml.fewshot", "h.py")
        assert [v.line for v in found] == [line], source
