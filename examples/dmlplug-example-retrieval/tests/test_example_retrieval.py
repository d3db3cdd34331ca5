"""Tests of dmlplug-example-retrieval: dmlplug's contract checks and known answers."""

import dmlplug_example_retrieval
import numpy as np
import optuna
import pytest

from dmlplug.testing import build, check_plugin, load_host

HOST = load_host(dmlplug_example_retrieval)


def unit(degrees):
    radians = np.radians(degrees)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1).astype(np.float32)


class Problem:
    """Queries and a gallery on the unit circle, searched exactly (what dmlplug hands a re-ranker)."""

    def __init__(self, queries, gallery):
        self.queries, self.gallery, self.depth, self.budget_bytes = queries, gallery, None, 1 << 20

    def search(self, queries, k, depth=None):
        order = np.argsort(-(queries @ self.gallery.T), axis=1, kind="stable")[:, :k]
        return np.pad(order, ((0, 0), (0, k - order.shape[1])), constant_values=-1)

    def search_in(self, gallery, queries, k, depth=None):
        return np.argsort(-(queries @ gallery.T), axis=1, kind="stable")[:, :k]

    def gallery_neighbours(self, n):
        sims = self.gallery @ self.gallery.T
        np.fill_diagonal(sims, -np.inf)
        return np.argsort(-sims, axis=1, kind="stable")[:, :n]


def test_passes_the_dmlplug_contracts():
    checked = check_plugin(dmlplug_example_retrieval)
    assert {("rerankers", "example_mutual"), ("index_codecs", "example_sq4"),
            ("tune_pruners", "example_hyperband")} <= set(checked)


def test_mutual_candidates_come_first():
    # Gallery at 0, 5, 10 degrees (a tight cluster) and 40 (alone); the query at 19 is nearest 10, 5, 0, then 40.
    # Only 40 is mutual: the query (21 degrees away) is nearer to it than its nearest other item (10, 30 away);
    # each cluster member's nearest other item is 5 degrees away, nearer than the query.
    problem = Problem(unit([19]), unit([0, 5, 10, 40]))
    assert problem.search(problem.queries, 4).tolist() == [[2, 1, 0, 3]]
    reranker = build("rerankers", "example_mutual", host=HOST, n=1, shortlist=4)
    assert np.asarray(reranker.rerank(problem, 4)).tolist() == [[3, 2, 1, 0]]
    # Only the shortlist is re-ordered.
    short = build("rerankers", "example_mutual", host=HOST, n=1, shortlist=2)
    assert np.asarray(short.rerank(problem, 4)).tolist() == [[2, 1, 0, 3]]


def test_the_codec_stores_half_a_byte_per_coordinate_and_finds_near_duplicates():
    codec = build("index_codecs", "example_sq4", host=HOST)
    rng = np.random.default_rng(0)
    gallery = rng.normal(size=(500, 32)).astype(np.float32)
    gallery /= np.linalg.norm(gallery, axis=1, keepdims=True)
    plan = codec.plan(len(gallery), 32, 10)
    index = codec.new_index(32, plan)
    index.train(gallery)
    index.add_with_ids(gallery, np.arange(500, dtype=np.int64))
    assert codec.bytes_floor(32, plan) == 32 / 2 + 8  # 4 bits a coordinate and the 8-byte id
    queries = gallery[:50] + 0.01 * rng.normal(size=(50, 32)).astype(np.float32)
    _, rows = index.search(queries, 1)
    assert (rows[:, 0] == np.arange(50)).mean() >= 0.96


def test_hyperband_stops_the_worst_trials_and_never_the_best():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = build("tune_pruners", "example_hyperband", host=HOST, min_resource=1, max_resource=9,
                   reduction_factor=3)
    study = optuna.create_study(direction="maximize", pruner=pruner, sampler=optuna.samplers.RandomSampler(seed=0))
    pruned = []
    for number in range(30):
        trial = study.ask()
        quality = (number * 7) % 30 / 30  # every trial's level, in a scrambled order
        for step in range(1, 10):
            trial.report(quality, step)
            if trial.should_prune():
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                pruned.append(quality)
                break
        else:
            study.tell(trial, quality)
    assert pruned and max(pruned) < max((number * 7) % 30 / 30 for number in range(30))
    assert pytest.approx(study.best_value) == max((number * 7) % 30 / 30 for number in range(30))
