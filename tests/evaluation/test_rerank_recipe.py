"""[evaluation] rerank in a recipe: checked by `dmlplug validate`, and its metrics can select best.pt."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import dmlplug
from dmlplug.errors import DmlplugError

QUICKSTART = Path(__file__).resolve().parents[2] / "recipes" / "quickstart.toml"


def _recipe(**evaluation):
    recipe = tomllib.loads(QUICKSTART.read_text())
    recipe["evaluation"].update(evaluation)
    return recipe


def test_rerank_tables_strings_and_one_table_validate():
    validated = dmlplug.validate(_recipe(rerank=[{"name": "aqe", "n": 3}, "krnn:k1=10", {"name": "dba"}]))
    assert validated.recipe.evaluation.rerank == [{"name": "aqe", "n": 3}, "krnn:k1=10", {"name": "dba"}]
    assert dmlplug.validate(_recipe(rerank={"name": "aqe"})).recipe.evaluation.rerank == [{"name": "aqe"}]
    assert dmlplug.validate(_recipe()).recipe.evaluation.rerank == []


def test_a_reranked_metric_can_select_best():
    dmlplug.validate(_recipe(rerank=[{"name": "aqe", "label": "qe"}], metric="map@r+qe"))
    with pytest.raises(DmlplugError, match="map@r\\+aqe"):
        dmlplug.validate(_recipe(rerank=[{"name": "dba"}], metric="map@r+aqe"))  # no method labelled aqe


def test_only_neighbour_metrics_have_reranked_names():
    # nmi is a clustering metric: re-ranking does not repeat it, so validate (not the first evaluation) refuses it.
    recipe = _recipe(rerank=[{"name": "aqe"}], metric="nmi+aqe")
    recipe["evaluators"].append({"name": "nmi"})
    with pytest.raises(DmlplugError, match="'nmi\\+aqe' is not produced"):
        dmlplug.validate(recipe)
    recipe["evaluation"]["metric"] = "recall@2+aqe"
    dmlplug.validate(recipe)


@pytest.mark.parametrize(("rerank", "message"), [
    ([{"name": "aqee"}], "unknown reranker 'aqee'.*did you mean 'aqe'"),
    (["krnn:k1=0"], "evaluation.rerank\\[0\\].k1: Input should be greater than or equal to 1"),
    ([{"name": "dba", "alpha": "x"}], "evaluation.rerank\\[0\\].alpha: Input should be a valid number"),
    ([{"name": "aqe"}, "aqe"], "two re-ranking methods are labelled 'aqe'"),
])
def test_bad_rerank_is_a_clear_validate_error(rerank, message):
    with pytest.raises(DmlplugError, match=message) as info:
        dmlplug.validate(_recipe(rerank=rerank))
    assert "evaluation.rerank" in (info.value.where or "") and info.value.fix
