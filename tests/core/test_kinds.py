"""The one list of kinds: every kind has its registration hook, every registration hook is a kind."""

from __future__ import annotations

from dmlplug import hookspecs
from dmlplug.protocols import KIND_PROTOCOLS, KIND_TABLE, KINDS
from dmlplug.registry import Registry, normalize_kind, singular


def test_every_kind_has_a_hook_and_every_registration_hook_a_kind():
    hooks = {name.removeprefix("register_") for name in hookspecs.__all__
             if name.startswith("register_") and name != "register_commands"}
    assert hooks == set(KINDS)
    assert list(KIND_PROTOCOLS) == list(KINDS) == [kind.name for kind in KIND_TABLE]


def test_names_resolve_both_ways_and_the_registry_has_a_table_per_kind():
    registry = Registry()
    for kind in KIND_TABLE:
        assert normalize_kind(kind.singular) == normalize_kind(kind.name) == kind.name
        assert singular(kind.name) == kind.singular
        assert registry.names(kind.name) == []
    assert len({kind.singular for kind in KIND_TABLE}) == len(KIND_TABLE)
