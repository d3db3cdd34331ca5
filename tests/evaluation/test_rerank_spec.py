"""Re-ranking specs: the text and table forms give one validated re-ranker table and its label; every bad spec is a
clear error (what, where, fix) from the registry's validation."""

from __future__ import annotations

import pytest

from dmlplug.errors import ComponentError, DmlplugError, RecipeError
from dmlplug.evaluation.rerank_spec import parse_rerank, parse_rerank_list
from dmlplug.plugins import get_host
from dmlplug.registry import Registry


@pytest.fixture(scope="module")
def registry():
    return get_host().registry


def test_specs_from_text_and_tables_are_the_same(registry):
    assert parse_rerank("aqe:n=3,alpha=2", registry=registry) == \
        parse_rerank({"name": "aqe", "n": 3, "alpha": 2}, registry=registry)
    krnn = parse_rerank("krnn", registry=registry)
    assert krnn.table.to_dict() == {"name": "krnn", "k1": 20, "k2": 6, "lambda": 0.3, "shortlist": 100}
    assert krnn.describe() == "krnn:k1=20,k2=6,lambda=0.3,shortlist=100" and krnn.label == "krnn"
    assert parse_rerank("krnn:lambda=0.5", registry=registry).table.params.lam == 0.5  # `lambda`, a keyword
    assert [s.label for s in parse_rerank_list([{"name": "aqe"}, {"name": "aqe", "n": 9, "label": "aqe9"}],
                                               registry=registry)] == ["aqe", "aqe9"]
    assert parse_rerank("dba:n=2,label=dba2", registry=registry) == \
        parse_rerank({"name": "dba", "n": 2, "label": "dba2"}, registry=registry)


@pytest.mark.parametrize(("spec", "error", "message"), [
    ("aqx", ComponentError, "unknown reranker 'aqx' \\(did you mean 'aqe'\\?\\)"),
    ("aqe:m=3", RecipeError, "rerank\\[0\\].m: unknown key"),
    ("krnn:lamda=0.3", RecipeError, "lamda: unknown key \\(did you mean 'lambda'\\?\\)"),
    ("aqe:n=0", RecipeError, "n: Input should be greater than or equal to 1"),
    ("aqe:n=two", RecipeError, "n: Input should be a valid integer"),
    ("krnn:lambda=1.5", RecipeError, "lambda: Input should be less than or equal to 1"),
    ("aqe:alpha=nan", RecipeError, "alpha: Input should be a finite number"),
    ({"name": "dba", "n": 2.5}, RecipeError, "n: Input should be a valid integer"),
    ({"n": 2}, ComponentError, "needs a `name`"),
    ("aqe:n", ComponentError, "'n' is not key=value"),
    (["aqe", "aqe"], RecipeError, "labelled 'aqe'"),
    ({"name": "aqe", "label": "a+b"}, RecipeError, "must be a non-empty word"),
    ("aqe:label=", RecipeError, "must be a non-empty word"),
    (3, RecipeError, "a name or a table"),
])
def test_bad_specs_are_clear_errors(registry, spec, error, message):
    with pytest.raises(error, match=message) as caught:
        parse_rerank_list(spec, registry=registry)
    assert caught.value.where and caught.value.where.startswith("rerank") and caught.value.fix, caught.value
    if "Input" in message or "unknown" in message:  # the registry's errors: where to see the valid names
        assert "dmlplug list rerankers" in caught.value.fix


def test_a_spec_is_looked_up_in_the_registry_it_is_given():
    with pytest.raises(DmlplugError, match="unknown reranker 'aqe'"):
        parse_rerank("aqe", registry=Registry())
