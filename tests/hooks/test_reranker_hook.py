"""``register_rerankers``: a throwaway plugin's re-ranker, named like a built-in one, re-ranks an evaluation (the
``+<label>`` metrics of ``[evaluation] rerank``) and an index search (``dmlplug search --rerank``), each through the
:class:`~dmlplug.protocols.RerankProblem` dmlplug fills; ``dmlplug validate`` checks it in a recipe."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
import throwaway
from pydantic import Field

import dmlplug
from dmlplug import Params
from dmlplug.bundle.index import ExactIndex
from dmlplug.bundle.rerank_search import reranked_search
from dmlplug.errors import ComponentError, RecipeError
from dmlplug.evaluation.rerank_spec import parse_rerank, parse_rerank_list
from dmlplug.plugins import get_host
from dmlplug.protocols import Reranker, RerankProblem
from dmlplug.recipe import load_recipe

QUICKSTART = Path(__file__).resolve().parents[2] / "recipes" / "quickstart.toml"


class ReverseParams(Params):
    """Parameters of the throwaway re-ranker."""

    span: int | None = Field(None, ge=1, description="Leading neighbours put in reverse order (default: all k).")


class Reverse:
    """The caller's exact order, its first ``span`` neighbours reversed: a result a test can predict exactly."""

    def __init__(self, span: int | None):
        self.span = span
        self.problems: list[RerankProblem] = []

    def rerank(self, problem: RerankProblem, k: int) -> np.ndarray:
        self.problems.append(problem)
        found = np.array(problem.search(problem.queries, k))  # every column certified: the reversed ones are read
        span = min(self.span or k, k)
        found[:, :span] = found[:, :span][:, ::-1]
        return found


class ReversePlugin:
    """Registers re-ranker ``hooks_reverse``, recording what it builds."""

    def __init__(self) -> None:
        self.registers: list = []
        self.built: list[Reverse] = []

    @dmlplug.hookimpl
    def register_rerankers(self, register):
        self.registers.append(register)
        register("hooks_reverse", self.build, params=ReverseParams, description="Throwaway re-ranker: reversed order.",
                 aliases=("hooks_reverse_alias",))

    def build(self, params: ReverseParams, ctx) -> Reverse:
        self.built.append(Reverse(params.span))
        return self.built[-1]


@pytest.fixture(scope="module")
def plugin():
    return ReversePlugin()


@pytest.fixture(scope="module")
def host(plugin):
    return throwaway.fresh_host((plugin, "hooks_rerank"))


def _data(n: int = 48, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(n // 4), 4)
    x = rng.normal(size=(n // 4, 8))[labels] + rng.normal(size=(n, 8))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), labels


def _exact_order(q: np.ndarray, g: np.ndarray, self_pos: np.ndarray | None = None) -> np.ndarray:
    sims = q.astype(np.float64) @ g.astype(np.float64).T
    if self_pos is not None:
        sims[np.arange(len(q)), self_pos] = -np.inf  # the query itself is never its own neighbour
    return np.argsort(-sims, axis=1, kind="stable")


@pytest.mark.hook("register_rerankers")
def test_a_registered_reranker_reranks_an_evaluation(host, plugin):
    assert callable(plugin.registers[0])
    info = host.registry.get("rerankers", "hooks_reverse_alias")
    assert (info.name, info.plugin, info.params) == ("hooks_reverse", "hooks_rerank", ReverseParams)
    x, y = _data()
    specs = parse_rerank_list(["hooks_reverse", {"name": "hooks_reverse", "span": 2, "label": "rev2"}],
                              registry=host.registry)
    plugin.built.clear()
    got = dmlplug.evaluate(x, y, [{"name": "recall", "k": [1, 2, 4]}], rerank=specs)
    assert len(plugin.built) == 2 and all(isinstance(r, Reranker) for r in plugin.built)
    problem = plugin.built[0].problems[-1]
    assert isinstance(problem, RerankProblem) and problem.depth is not None and problem.budget_bytes > 0
    order = _exact_order(x, x, np.arange(len(x)))[:, :4]  # width 4: recall@4's depth
    reversed_all, reversed_two = order[:, ::-1], np.concatenate([order[:, 1::-1], order[:, 2:]], axis=1)
    for label, ranking in (("hooks_reverse", reversed_all), ("rev2", reversed_two)):
        hits = y[ranking] == y[:, None]
        for k in (1, 2, 4):
            assert got[f"recall@{k}+{label}"] == pytest.approx(hits[:, :k].any(1).mean(), abs=1e-12), (label, k)
    assert got["recall@1+hooks_reverse"] != got["recall@1"]  # the re-ranker changed the metric: the test can fail


@pytest.mark.hook("register_rerankers")
def test_a_registered_reranker_reranks_an_index_search(host, plugin):
    x, _ = _data()
    g, q = x[8:], x[:8]
    index = ExactIndex(g, [f"g{i}" for i in range(len(g))])
    plugin.built.clear()
    sims, rows = reranked_search(index, q, 5, parse_rerank("hooks_reverse:span=3", registry=host.registry))
    order = _exact_order(q, g)[:, :5]
    np.testing.assert_array_equal(rows, np.concatenate([order[:, 2::-1], order[:, 3:]], axis=1))
    np.testing.assert_allclose(sims, np.einsum("qd,qkd->qk", q, g[rows]), atol=1e-6)  # cosines stay the scores
    (problem,) = plugin.built[0].problems
    assert isinstance(problem, RerankProblem) and problem.depth is None
    np.testing.assert_array_equal(problem.gallery_neighbours(2), _exact_order(g, g, np.arange(len(g)))[:, :2])


@pytest.mark.hook("register_rerankers")
def test_a_registered_reranker_is_checked_in_a_recipe(host):
    recipe = tomllib.loads(QUICKSTART.read_text())
    recipe["evaluation"].update(rerank=["hooks_reverse:span=2"], metric="recall@1+hooks_reverse")
    assert [spec.describe() for spec in load_recipe(recipe, registry=host.registry).rerank] == \
        ["hooks_reverse:span=2"]
    recipe["evaluation"]["rerank"] = [{"name": "hooks_reverse", "span": 0}]
    with pytest.raises(RecipeError, match=r"evaluation\.rerank\[0\]\.span: Input should be greater") as caught:
        load_recipe(recipe, registry=host.registry)
    assert "dmlplug list rerankers --params" in (caught.value.fix or "")
    # The name is looked up in the registry the caller works with, never in another one.
    with pytest.raises(ComponentError, match="unknown reranker 'hooks_reverse'"):
        parse_rerank("hooks_reverse", registry=get_host().registry)
