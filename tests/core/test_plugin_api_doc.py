"""docs/plugin-api.md stays true: every name it lists exists, and it mentions every protocol, every ``RunView``
attribute and every ``BuildContext`` field (the module table itself is checked by test_plugin_boundary.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import re
import sys
import types

import pytest
from test_plugin_boundary import DOC, PUBLIC_MODULES, doc_section, table_rows

from dmlplug import protocols
from dmlplug.context import BuildContext

IDENTIFIER = re.compile(r"^([A-Za-z_]\w*)(\(.*\))?$")


def _ticked(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def _identifier(token: str) -> str | None:
    match = IDENTIFIER.match(token)
    return match.group(1) if match else None


def _members(obj: object) -> set[str]:
    """Attributes, annotated fields and dataclass fields of a class (or a module's names)."""
    names = set(dir(obj))
    for klass in getattr(obj, "__mro__", ()):
        names |= set(getattr(klass, "__annotations__", {}))
    if dataclasses.is_dataclass(obj):
        names |= {f.name for f in dataclasses.fields(obj)}
    return names


def _public_namespace() -> dict[str, object]:
    """Every name a public module defines or re-exports, for resolving the names in headings and rows."""
    namespace: dict[str, object] = {}
    for entry in PUBLIC_MODULES:
        module = importlib.import_module(entry.removesuffix(".*"))
        for name in dir(module):
            if not name.startswith("_"):
                namespace.setdefault(name, getattr(module, name))
    return namespace


def _protocol_classes() -> dict[str, type]:
    return {name: obj for name, obj in vars(protocols).items()
            if inspect.isclass(obj) and obj.__module__ == protocols.__name__
            and (getattr(obj, "_is_protocol", False) or dataclasses.is_dataclass(obj))}


# ------------------------------------------------------------------------------------------------- names exist


def test_every_name_in_the_module_table_exists():
    missing = []
    for modules_cell, names_cell in table_rows(doc_section("Public modules")):
        modules = [importlib.import_module(m) for m in re.findall(r"`(dmlplug[\w.]*)`", modules_cell)]
        resolved = []
        for token in _ticked(names_cell):
            name = _identifier(token)
            if name is None:
                continue  # a path or an expression (`docs/hooks.md`)
            found = [getattr(m, name) for m in modules if hasattr(m, name)]
            # `extra_requires()` / `build(kind, table)`: a member of a name listed earlier in the row.
            found += [getattr(obj, name) for obj in resolved if hasattr(obj, name)]
            if not found:
                missing.append(f"{token} (row {modules_cell})")
            resolved += found
    assert not missing, f"docs/plugin-api.md lists names that do not exist: {missing}"


def _protocol_subsections() -> list[tuple[str, str]]:
    """``(heading, body)`` of every ``### `` subsection of "Component protocols"."""
    parts = re.split(r"^### (.*)$", doc_section("Component protocols"), flags=re.M)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def test_protocol_tables_name_real_members():
    namespace = _public_namespace()
    wrong = []
    for heading, body in _protocol_subsections():
        owners = [namespace[n] for n in _ticked(heading) if n in namespace]
        for cells in table_rows(body):
            member = _identifier(_ticked(cells[0])[0]) if _ticked(cells[0]) else None
            row_owners = owners + [namespace[n] for n in _ticked(cells[0])[1:] if n in namespace]
            if member is None or not any(member in _members(o) for o in row_owners):
                wrong.append(f"{heading}: {cells[0]}")
    assert not wrong, f"protocol tables list members their protocols lack: {wrong}"


def test_every_component_protocol_member_is_in_its_table():
    documented: dict[str, set[str]] = {}
    for heading, body in _protocol_subsections():
        for cells in table_rows(body):
            ticked = _ticked(cells[0])
            member = _identifier(ticked[0]) if ticked else None
            for owner in [*_ticked(heading), *ticked[1:]]:
                documented.setdefault(owner, set()).add(member)
    missing = []
    for name, klass in _protocol_classes().items():
        if name in ("RunView", "Register", "Factory", "ReportSection"):
            continue  # documented in their own sections
        own = {m for m in vars(klass) if not m.startswith("_") or m in ("__call__", "__iter__", "__len__")}
        own |= set(getattr(klass, "__annotations__", {}))
        own -= {"__annotations__"}
        missing += [f"{name}.{m}" for m in sorted(own - documented.get(name, set()))]
    assert not missing, f"docs/plugin-api.md's protocol tables miss: {missing}"


# ------------------------------------------------------------------------------------------------- everything mentioned


def test_every_protocol_is_mentioned():
    text = DOC.read_text()
    missing = [name for name in _protocol_classes() if f"`{name}`" not in text]
    assert not missing, f"docs/plugin-api.md does not mention: {missing}"


def _first_cells(section: str) -> list[str]:
    return [_identifier(_ticked(cells[0])[0]) for cells in table_rows(doc_section(section)) if _ticked(cells[0])]


def test_every_runview_attribute_is_documented():
    attributes = set(protocols.RunView.__annotations__)
    documented = _first_cells("`RunView`")
    assert len(documented) == len(set(documented)), documented
    assert set(documented) == attributes, (
        f"RunView section: missing {sorted(attributes - set(documented))}, "
        f"not attributes {sorted(set(documented) - attributes)}")


def test_every_build_context_field_and_method_is_documented():
    fields = {f.name for f in dataclasses.fields(BuildContext)}
    methods = {name for name, _ in inspect.getmembers(BuildContext, inspect.isfunction) if not name.startswith("_")}
    documented = _first_cells("`BuildContext`")
    assert len(documented) == len(set(documented)), documented
    assert set(documented) == fields | methods, (
        f"BuildContext section: missing {sorted((fields | methods) - set(documented))}, "
        f"not fields or methods {sorted(set(documented) - fields - methods)}")


@pytest.mark.parametrize("hook", ["on_run_start", "on_epoch_start", "on_step_end", "on_eval_end", "on_checkpoint",
                                  "on_run_end", "report_section"])
def test_hooks_named_in_the_doc_exist(hook):
    from dmlplug import hookspecs

    assert hasattr(getattr(hookspecs, hook), "dmlplug_spec")
    assert f"`{hook}" in DOC.read_text()


def _vocabulary() -> tuple[set[str], set[str]]:
    """Documented requirements (``"loss:<tag>"`` kept as written) and tags."""
    section = doc_section("`requires` and `tags`")
    rows = table_rows(section)
    requirements = {_ticked(c[0])[0].strip('"') for c in rows if len(c) == 3 and c[0].startswith('`"')}
    tags = {t for c in rows if not c[0].startswith('`"') for t in _ticked(c[0])}
    return requirements, tags


def test_the_requirement_vocabulary_covers_the_engine_services():
    requirements, _ = _vocabulary()
    assert {"features", "feature_map", "views:N", "ema", "named_embeddings"} <= requirements


def test_every_requirement_of_a_builtin_is_in_the_vocabulary():
    from dmlplug.plugins import PluginHost
    from dmlplug.protocols.kinds import KINDS

    requirements, tags = _vocabulary()
    host = PluginHost().load(entry_points=False)
    unknown = []
    for kind in KINDS:
        for info in host.registry.infos(kind):
            needed = set(info.requires)
            # Defaults (parameters may add more); a Params model with required fields: registered ones only.
            with contextlib.suppress(Exception):
                needed |= set(info.params().extra_requires())
            for requirement in needed:
                section, _, tag = requirement.partition(":")
                if section == "views" or not tag:
                    ok = (section == "views" and "views:N" in requirements) or requirement in requirements
                else:
                    ok = f"{section}:<tag>" in requirements and tag in tags
                if not ok:
                    unknown.append(f"{info.name} ({kind}): {requirement}")
    assert not unknown, f"requirements not explained in docs/plugin-api.md: {unknown}"


def test_the_nested_table_example_works(monkeypatch):
    """The documented ComponentTable field checks the nested table in the recipe's registry and builds it."""
    from dmlplug import BuildContext
    from dmlplug.errors import RecipeError
    from dmlplug.plugins import PluginHost
    from dmlplug.registry import ComponentInfo

    code = re.search(r"```python\n(.*?)```", doc_section("Nested component tables"), flags=re.S).group(1)
    code = code.replace("    ...\n", "    return inner\n")
    module = types.ModuleType("plugin_api_example")  # pydantic resolves annotations in the class's module
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code, "plugin-api.md", "exec"), module.__dict__)
    namespace = module.__dict__
    info = ComponentInfo("losses", "wrapper", namespace["build_wrapper"], namespace["WrapperParams"])
    host = PluginHost().load(entry_points=False)
    good = {"loss": {"name": "contrastive", "pos_margin": 0.1}}
    params = info.validate(good, where="loss", registry=host.registry)
    assert params.loss.name == "contrastive" and params.loss.params.pos_margin == 0.1
    assert params.model_dump()["loss"]["pos_margin"] == 0.1 and "neg_margin" in params.model_dump()["loss"]
    built = info.build(params, BuildContext(host=host))
    assert type(built).__name__ == "ContrastiveLoss" and built.pos_margin == 0.1
    for bad, message in (({"loss": {"name": "contrastiv"}}, "unknown loss 'contrastiv'.*did you mean"),
                         ({"loss": {"name": "contrastive", "bogus": 1}}, r"loss\.bogus|bogus: unknown key")):
        with pytest.raises(RecipeError, match=message):
            info.validate(bad, where="loss", registry=host.registry)


def test_the_essential_plugins_named_are_the_ones_that_cannot_be_disabled():
    from dmlplug.plugins import ESSENTIAL_PLUGINS

    sentence = re.search(r"The plugins (.+?) are \*essential\*", DOC.read_text(encoding="utf-8"), re.S)
    assert sentence, "docs/plugin-api.md no longer says which plugins are essential"
    assert set(_ticked(sentence.group(1))) == set(ESSENTIAL_PLUGINS)


def test_every_public_member_of_the_evaluation_context_is_documented():
    from dmlplug.evaluation.context import EvalContext

    section = DOC.read_text(encoding="utf-8").split("### What evaluators read: `EvalContext`", 1)[1]
    section = section.split("\n### ", 1)[0]
    documented = {_identifier(token) for token in _ticked(section)}
    probe = EvalContext(__import__("numpy").eye(4, dtype="float32"), [0, 0, 1, 1])
    public = {name for name in dir(probe) if not name.startswith("_")}
    assert public <= documented, f"EvalContext members missing from docs/plugin-api.md: {sorted(public - documented)}"
