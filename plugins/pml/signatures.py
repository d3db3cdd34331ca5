"""The constructor signatures of pytorch-metric-learning's classes (argument names and defaults), and their generator.

The plugin's Params models take every argument name and default from PML's own constructors, so nothing about
PML's signatures is copied by hand (:mod:`.catalog` keeps only what PML cannot tell). Reading a signature needs
the class, and importing PML imports torch; to keep ``dmlplug validate`` and plugin loading torch-free, the
signatures are package data, one JSON file per PML version in ``signatures_data/`` (``2.9.0.json``)::

    {"pml_version": "2.9.0",
     "modules": {"losses": {"ContrastiveLoss": [{"name": "pos_margin", "default": 0}, ...], ...}, ...}}

An argument is ``{"name", "default"}``, ``{"name", "required": true}`` (no default), or ``{"name", "callable":
"module.qualname"}`` (a function as default, which JSON cannot hold). The arguments of a class are those of its
``__init__`` and, while an ``__init__`` passes ``*args`` / ``**kwargs`` on, of its base classes' (PML's losses
take ``distance``, ``reducer`` ... that way), in that order; ``self`` and the catch-alls themselves are left out.

When the installed PML has a file, :func:`signatures` reads it (imports neither PML nor torch). For any other
installed PML the signatures are read from PML itself, which **imports PML and torch** (once per process), so
plugin loading is no longer torch-free until the file for that version is generated. Without PML installed, the
newest stored file is used (recipes validate; building a component then fails on the missing import).

Run ``python -m dmlplug_builtins.pml.generate_signatures`` after upgrading PML: it writes the file for the
installed version (older versions' files stay). ``tests/builtins/pml/test_pml_signatures.py`` fails while the
installed PML has no file or its file differs from what PML gives.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

#: Where the per-version JSON files are (shipped as package data of ``dmlplug_builtins.pml``).
DATA_DIR = Path(__file__).with_name("signatures_data")
#: The PML sub-modules whose classes are read, in file order.
MODULES: tuple[str, ...] = ("losses", "miners", "distances", "reducers", "regularizers")
#: PML's distribution name (for its version, read from the metadata without importing it).
DISTRIBUTION = "pytorch-metric-learning"


class _Required:
    """The default of an argument PML requires (it has none)."""

    def __repr__(self) -> str:
        return "REQUIRED"


#: :attr:`PmlArg.default` of an argument without a default.
REQUIRED: Any = _Required()


class Opaque(NamedTuple):
    """A default JSON cannot hold (a function): only its dotted name is kept; the class's own default is used."""

    qualname: str


class PmlArg(NamedTuple):
    """One constructor argument: its name and PML's default (:data:`REQUIRED`, an :class:`Opaque`, or a value)."""

    name: str
    default: Any

    @property
    def required(self) -> bool:
        """Whether PML has no default for it."""
        return self.default is REQUIRED


class PmlSignatures(NamedTuple):
    """The constructor arguments of every class of one PML version: ``classes[module][class] = (PmlArg, ...)``."""

    version: str
    classes: Mapping[str, Mapping[str, tuple[PmlArg, ...]]]

    def of(self, module: str, cls: str) -> tuple[PmlArg, ...]:
        """The arguments of ``pytorch_metric_learning.<module>.<cls>``.

        Raises:
            KeyError: This PML version has no such class.
        """
        return self.classes[module][cls]

    def args(self, module: str, cls: str) -> dict[str, PmlArg]:
        """The arguments of a class by name."""
        return {arg.name: arg for arg in self.of(module, cls)}


@cache
def installed_version() -> str | None:
    """The installed PML's version from its distribution metadata (imports nothing), ``None`` if absent."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return None


def data_file(version: str, data_dir: Path | None = None) -> Path:
    """The JSON file holding PML ``version``'s signatures (it may not exist)."""
    return (DATA_DIR if data_dir is None else data_dir) / f"{version}.json"


def stored_versions(data_dir: Path | None = None) -> list[str]:
    """The versions with a stored file, oldest first."""
    folder = DATA_DIR if data_dir is None else data_dir

    def key(version: str) -> tuple[Any, ...]:
        return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))

    return sorted((p.stem for p in folder.glob("*.json")), key=key)


def signatures(version: str | None = None) -> PmlSignatures:
    """The signatures of the installed PML (or of ``version``).

    From the stored JSON file when one matches the version (imports neither PML nor torch); otherwise read from
    the installed PML itself, which **imports PML and torch** (cached per process). Without PML installed, the
    newest stored file.
    """
    version = installed_version() if version is None else version
    if version is not None and data_file(version).is_file():
        return _load(data_file(version))
    if version is None:
        stored = stored_versions()
        if stored:
            return _load(data_file(stored[-1]))
    return from_installed_pml()


@cache
def _load(path: Path) -> PmlSignatures:
    return parse(json.loads(path.read_text(encoding="utf-8")))


def parse(data: Mapping[str, Any]) -> PmlSignatures:
    """:class:`PmlSignatures` from the JSON form."""
    classes = {
        module: {cls: tuple(_arg(entry) for entry in entries) for cls, entries in by_class.items()}
        for module, by_class in data["modules"].items()
    }
    return PmlSignatures(data["pml_version"], classes)


def _arg(entry: Mapping[str, Any]) -> PmlArg:
    if entry.get("required"):
        return PmlArg(entry["name"], REQUIRED)
    if "callable" in entry:
        return PmlArg(entry["name"], Opaque(entry["callable"]))
    return PmlArg(entry["name"], entry["default"])


def _entry(arg: PmlArg) -> dict[str, Any]:
    if arg.default is REQUIRED:
        return {"name": arg.name, "required": True}
    if isinstance(arg.default, Opaque):
        return {"name": arg.name, "callable": arg.default.qualname}
    return {"name": arg.name, "default": arg.default}


def class_arguments(cls: type) -> tuple[PmlArg, ...]:
    """The constructor arguments of a PML class, following ``*args`` / ``**kwargs`` up its bases."""
    import torch

    args: dict[str, PmlArg] = {}
    for klass in cls.__mro__:
        if klass in (torch.nn.Module, object):
            break
        if "__init__" not in vars(klass):
            continue
        parameters = inspect.signature(vars(klass)["__init__"]).parameters.values()
        for p in parameters:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name == "self" or p.name in args:
                continue
            args[p.name] = PmlArg(p.name, _default(p.default, p.empty))
        if not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
            break
    return tuple(args.values())


def _default(value: Any, empty: Any) -> Any:
    if value is empty:
        return REQUIRED
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return Opaque(f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', type(value).__qualname__)}")


@cache
def from_installed_pml() -> PmlSignatures:
    """The signatures of every class the installed PML's sub-modules export (imports PML and torch; cached)."""
    import importlib

    import pytorch_metric_learning

    classes: dict[str, dict[str, tuple[PmlArg, ...]]] = {}
    for module_name in MODULES:
        module = importlib.import_module(f"pytorch_metric_learning.{module_name}")
        exported = sorted(name for name, obj in vars(module).items()
                          if inspect.isclass(obj) and obj.__module__.startswith(module.__name__))
        classes[module_name] = {name: class_arguments(getattr(module, name)) for name in exported}
    return PmlSignatures(pytorch_metric_learning.__version__, classes)


def render(sigs: PmlSignatures) -> str:
    """The JSON text of a signatures file (stable: classes sorted, arguments in signature order)."""
    modules = []
    for module, by_class in sigs.classes.items():
        classes = []
        for cls, args in sorted(by_class.items()):
            entries = ",\n".join(f"    {json.dumps(_entry(a))}" for a in args)
            classes.append(f"   {json.dumps(cls)}: [" + (f"\n{entries}\n   ]" if args else "]"))
        modules.append(f"  {json.dumps(module)}: {{\n" + ",\n".join(classes) + "\n  }")
    return (f'{{\n "pml_version": {json.dumps(sigs.version)},\n "modules": {{\n' + ",\n".join(modules)
            + "\n }\n}\n")
