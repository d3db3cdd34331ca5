"""Scaffold templates of the retrieval and tuning kinds: re-rankers, index codecs, tune samplers and pruners."""

from __future__ import annotations

from dmlplug.scaffold.codec_template import INDEX_CODEC
from dmlplug.scaffold.template import KindTemplate

RERANKER = KindTemplate(
    suffix="top1_expansion", module="reranker", class_suffix="Reranker",
    description="Query expansion with the first neighbour: search again with normalize(q + weight·g_1).",
    params='''
weight: float = Field(1.0, ge=0, description="Weight of the first neighbour added to the query.")
''',
    factory="return $Class(params.weight)",
    implementation='''"""The ``$name`` re-ranker (imported only by the factory)."""

from __future__ import annotations

import numpy as np


class $Class:
    """Each query moves towards its first neighbour, then the gallery is searched again.

    Args:
        weight: Weight of the first neighbour.
    """

    def __init__(self, weight: float = 1.0):
        self.weight = weight

    def rerank(self, problem, k):
        """``Q×k`` gallery rows of the expanded queries (a ``dmlplug.protocols.RerankProblem``)."""
        first = np.asarray(problem.search(problem.queries, 1))[:, 0]
        found = first >= 0
        expanded = np.array(problem.queries, dtype=np.float64)
        expanded[found] += self.weight * np.asarray(problem.gallery, dtype=np.float64)[first[found]]
        expanded /= np.maximum(np.linalg.norm(expanded, axis=1, keepdims=True), 1e-12)
        return problem.search(expanded.astype(np.float32), k, problem.depth)
''',
    tests='''
import numpy as np
import pytest

import $module
from dmlplug.testing import build, check_plugin, load_host


def unit(degrees):
    radians = np.radians(degrees)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1).astype(np.float32)


class Problem:
    """A query and a gallery on the unit circle, searched exactly (what dmlplug hands a re-ranker)."""

    def __init__(self, queries, gallery):
        self.queries, self.gallery, self.depth, self.budget_bytes = queries, gallery, None, 1 << 20

    def search(self, queries, k, depth=None):
        return np.argsort(-(queries @ self.gallery.T), axis=1, kind="stable")[:, :k]

    def search_in(self, gallery, queries, k, depth=None):
        return np.argsort(-(queries @ gallery.T), axis=1, kind="stable")[:, :k]

    def gallery_neighbours(self, n):
        sims = self.gallery @ self.gallery.T
        np.fill_diagonal(sims, -np.inf)
        return np.argsort(-sims, axis=1, kind="stable")[:, :n]


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


@pytest.mark.parametrize(("weight", "expected"), [(0.0, [0, 2, 1]), (100.0, [0, 1, 2])])
def test_known_answers(weight, expected):
    # The query at -25 degrees is nearest the item at 0, then -60, then 50; moved onto the item at 0, the item at
    # 50 (50 degrees away) comes before the one at -60 (60 degrees away).
    reranker = build("$kind", "$name", host=load_host($module), weight=weight)
    rows = reranker.rerank(Problem(unit([-25]), unit([0, 50, -60])), 3)
    assert np.asarray(rows).tolist() == [expected]
''',
    recipe='''
[evaluation]
rerank = [{name = "$name", weight = 1.0}]
# or: dmlplug search BUNDLE INDEX IMAGE --rerank $name:weight=1.0
''')

TUNE_SAMPLER = KindTemplate(
    suffix="centre_first", module="sampler", class_suffix="Sampler",
    description="The first trial at the centre of every range (first choices), the others at random.",
    params='''
independent: bool = Field(True, description="Draw the later trials' values independently (Optuna's RandomSampler).")
''',
    factory="return $Class(ctx.seed)",
    implementation='''"""The ``$name`` Optuna sampler (imported only by the factory)."""

from __future__ import annotations

import math

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution


def centre(distribution):
    """The middle of a range (geometric on a log scale, on the step grid), or a categorical's first choice."""
    if isinstance(distribution, CategoricalDistribution):
        return distribution.choices[0]
    low, high = distribution.low, distribution.high
    middle = math.exp((math.log(low) + math.log(high)) / 2) if distribution.log else (low + high) / 2
    step = getattr(distribution, "step", None)
    if step:
        middle = low + round((middle - low) / step) * step
    return int(round(middle)) if isinstance(distribution, IntDistribution) else float(middle)


class $Class(optuna.samplers.BaseSampler):
    """Trial 0 gets every key's centre; later trials are drawn by a seeded random sampler.

    Args:
        seed: ``[tune] sampler_seed`` (``None``: fresh randomness).
    """

    def __init__(self, seed=None):
        self.random = optuna.samplers.RandomSampler(seed=seed)

    def infer_relative_search_space(self, study, trial):
        """No relative sampling: every key is sampled on its own."""
        return {}

    def sample_relative(self, study, trial, search_space):
        """Nothing sampled jointly."""
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution):
        """The centre on trial 0, a random value afterwards."""
        if trial.number == 0 and isinstance(param_distribution, (CategoricalDistribution, FloatDistribution,
                                                                  IntDistribution)):
            return centre(param_distribution)
        return self.random.sample_independent(study, trial, param_name, param_distribution)
''',
    tests='''
import optuna

import $module
from dmlplug.testing import build, check_plugin, load_host, make_context


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


def test_the_first_trial_is_the_centre_and_the_next_are_random():
    host = load_host($module)
    sampler = build("$kind", "$name", ctx=make_context(host, seed=0), host=host)
    study = optuna.create_study(sampler=sampler)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    values = []
    for _ in range(3):
        trial = study.ask()
        values.append((trial.suggest_float("lr", 1e-4, 1e-2, log=True), trial.suggest_int("k", 1, 5),
                       trial.suggest_categorical("loss", ["arcface", "margin"])))
        study.tell(trial, 0.0)
    lr, k, loss = values[0]
    assert abs(lr - 1e-3) < 1e-12 and k == 3 and loss == "arcface"
    assert len(set(values)) == 3
''',
    recipe='''
[tune.sampler]  # in a dmlplug tune space file
name = "$name"
''')

TUNE_PRUNER = KindTemplate(
    suffix="patience", module="pruner", class_suffix="Pruner",
    description="Stop a trial whose reported value has not improved for `patience` steps.",
    params='''
patience: int = Field(3, ge=1, description="Steps without a better value before the trial stops.")
min_delta: float = Field(0.0, ge=0, description="How much better a value must be to count as better.")
''',
    factory="return $Class(params.patience, params.min_delta)",
    implementation='''"""The ``$name`` Optuna pruner (imported only by the factory)."""

from __future__ import annotations

import optuna


class $Class(optuna.pruners.BasePruner):
    """Prunes when none of the last ``patience`` reports beats the best before them by ``min_delta``.

    Args:
        patience: Steps without improvement.
        min_delta: The least improvement that counts.
    """

    def __init__(self, patience: int = 3, min_delta: float = 0.0):
        self.patience, self.min_delta = patience, min_delta

    def prune(self, study, trial):
        """Whether ``trial`` stops now."""
        values = trial.intermediate_values
        steps = sorted(values)
        if len(steps) <= self.patience:
            return False
        sign = 1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1.0
        best_before = max(sign * values[s] for s in steps[:-self.patience])
        return all(sign * values[s] <= best_before + self.min_delta for s in steps[-self.patience:])
''',
    tests='''
import optuna
import pytest

import $module
from dmlplug.testing import build, check_plugin, load_host


def test_passes_the_dmlplug_contracts():
    assert ("$kind", "$name") in check_plugin($module)


@pytest.mark.parametrize(("direction", "reports", "pruned"), [
    ("maximize", [0.1, 0.5, 0.4, 0.45], True),    # nothing above 0.5 in the last two
    ("maximize", [0.1, 0.5, 0.4, 0.6], False),
    ("minimize", [0.9, 0.5, 0.6, 0.55], True),    # nothing below 0.5 in the last two
    ("maximize", [0.1, 0.2], False),              # too few reports to judge
])
def test_known_answers(direction, reports, pruned):
    pruner = build("$kind", "$name", host=load_host($module), patience=2)
    study = optuna.create_study(direction=direction, pruner=pruner)
    trial = study.ask()
    for step, value in enumerate(reports, start=1):
        trial.report(value, step)
    assert trial.should_prune() is pruned
''',
    recipe='''
[tune.pruner]  # in a dmlplug tune space file
name = "$name"
patience = 3
''')

TEMPLATES = {"rerankers": RERANKER, "index_codecs": INDEX_CODEC, "tune_samplers": TUNE_SAMPLER,
             "tune_pruners": TUNE_PRUNER}
