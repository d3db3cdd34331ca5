"""TensorBoard and record-keeper loggers: tags read back from the event files, records read back from CSV/SQLite."""

from __future__ import annotations

import csv
import importlib.util
import sqlite3

import numpy as np
import pytest
from e2e import TINY_RECIPE

from dmlplug.engine.flatten import flatten_recipe
from dmlplug.errors import RecipeError
from dmlplug.evaluation import EvalContext
from dmlplug.evaluation.pairs import sample_pair_distances
from dmlplug.plugins import get_host
from dmlplug_builtins.loggers.tensorboard_logger import hparam_values

# ------------------------------------------------------------------------------------------ pair sampling


def _brute_force(x: np.ndarray, labels: np.ndarray, queries: np.ndarray, gallery: np.ndarray):
    pos, neg = set(), set()
    for q in queries:
        for g in gallery:
            if q == g:
                continue
            d = round(float(np.linalg.norm(x[q].astype(np.float64) - x[g])), 9)
            (pos if labels[q] == labels[g] else neg).add(d)
    return pos, neg


@pytest.mark.parametrize("masks", [False, True])
def test_sampled_pairs_are_valid_pairs_and_cover_all_of_them(masks):
    rng = np.random.default_rng(0)
    labels = np.array([5, 5, 5, 9, 9, 2, 7, 7, 7, 7])  # class 2 is a lone query in leave-one-out mode
    x = rng.normal(size=(len(labels), 3)).astype(np.float32)  # all pair distances distinct
    kwargs = {}
    queries = gallery = np.arange(len(labels))
    if masks:
        q_mask = np.zeros(len(labels), bool)
        q_mask[[0, 3, 6, 5]] = True
        g_mask = np.ones(len(labels), bool)
        g_mask[6] = False
        kwargs = {"query_mask": q_mask, "gallery_mask": g_mask}
        queries, gallery = np.flatnonzero(q_mask), np.flatnonzero(g_mask)
    ctx = EvalContext(x, labels, backend="torch", **kwargs)
    pos_true, neg_true = _brute_force(x, labels, queries, gallery)
    pos, neg = sample_pair_distances(ctx, 20_000, seed=1)
    assert len(pos) == len(neg) == 20_000
    pos_seen, neg_seen = set(np.round(pos, 9)), set(np.round(neg, 9))
    assert pos_seen == pos_true  # only positive pairs, never a query with itself, and every one of them
    assert neg_seen == neg_true
    again = sample_pair_distances(ctx, 20_000, seed=1)
    assert np.array_equal(again[0], pos) and np.array_equal(again[1], neg)


def test_positive_partners_are_drawn_uniformly():
    # One class of 3 at distances 1 and 3 from item 0: item 0's partners are equally likely.
    x = np.array([[0.0], [1.0], [3.0], [100.0], [101.0]], np.float32)
    ctx = EvalContext(x, np.array([0, 0, 0, 1, 1]), backend="torch")
    pos, _ = sample_pair_distances(ctx, 60_000, seed=0)
    # Queries 0,1,2,3,4 equally likely; 0 -> {1, 3}, 1 -> {1, 2}, 2 -> {3, 2}, 3/4 -> {1}.
    share = {d: float(np.mean(np.isclose(pos, d))) for d in (1.0, 2.0, 3.0)}
    assert share[1.0] == pytest.approx(0.1 + 0.1 + 0.4, abs=0.01)
    assert share[2.0] == pytest.approx(0.2, abs=0.01) and share[3.0] == pytest.approx(0.2, abs=0.01)


def test_flatten_hparams():
    recipe = {"run": {"epochs": 2, "name": "x"}, "evaluators": [{"name": "recall", "k": [1, 2]}],
              "head": {"dropout": None}}
    assert flatten_recipe(recipe) == {"run.epochs": 2, "run.name": "x", "evaluators[0].name": "recall",
                                      "evaluators[0].k": [1, 2], "head.dropout": None}
    flat = hparam_values(flatten_recipe(recipe))
    assert flat == {"run.epochs": 2, "run.name": "x", "evaluators[0].name": "recall", "evaluators[0].k": "[1, 2]",
                    "head.dropout": "None"}


# ------------------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(("logger", "missing", "fix"), [
    ("tensorboard", "tensorboard", "pip install tensorboard"),
    ("record_keeper", "record_keeper", "pip install record-keeper"),
    ("record_keeper", "tensorboard", "pip install tensorboard"),
])
def test_missing_logger_package_fails_at_validation(monkeypatch, logger, missing, fix):
    from tests.shared.recipes import load_recipe

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else real(name, *a))
    recipe = TINY_RECIPE + f'[[loggers]]\nname = "{logger}"\n'
    with pytest.raises(RecipeError) as info:
        load_recipe(recipe_dict(recipe))
    message = info.value.render()
    assert "loggers[1]" in message and fix in message and "not installed" in message


def test_record_keeper_without_tensorboard_does_not_need_it(monkeypatch):
    from tests.shared.recipes import load_recipe

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    load_recipe(recipe_dict(TINY_RECIPE + '[[loggers]]\nname = "record_keeper"\ntensorboard = false\n'))


def recipe_dict(text: str) -> dict:
    import tomllib

    return tomllib.loads(text)


# ------------------------------------------------------------------------------------------ end to end

RECIPE = TINY_RECIPE.replace('[optimizer]', '[miner]\nname = "multi_similarity"\n[optimizer]').replace(
    'name = "tiny"', 'name = "tiny"\nlog_every = 1') + """
[[evaluators]]
name = "opis"
[[loggers]]
name = "tensorboard"
projector_samples = 50
thumbnail_size = 16
[[loggers]]
name = "record_keeper"
"""


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory):
    from dmlplug.engine.launch import run_recipe

    out = tmp_path_factory.mktemp("loggers") / "run"
    result = run_recipe(recipe_dict(RECIPE), out=out, device="cpu", quiet=True, host=get_host())
    assert result.status == "completed"
    return out


def _events(directory):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(directory), size_guidance={"scalars": 0, "histograms": 0, "images": 0,
                                                          "tensors": 0})
    acc.Reload()
    return acc


@pytest.mark.slow
def test_tensorboard_tags_read_back(logged_run):
    acc = _events(logged_run / "tb")
    tags = acc.Tags()
    scalars = set(tags["scalars"])
    assert {"train/loss/loss", "train/loss/total", "eval/test/recall@1", "eval/test/opis"} <= scalars
    assert {"train/lr/backbone", "train/lr/head"} <= scalars
    # PML statistics through record-keeper: the miner's mined pairs at every step.
    mined = acc.Scalars("train/pml/miner_MultiSimilarityMiner/num_pos_pairs")
    assert len(mined) >= 2 and all(e.value > 0 for e in mined)
    # Pair-distance histograms at the initial and final evaluation, positives closer than negatives at the end.
    assert {"eval/test/pair_distance/positive", "eval/test/pair_distance/negative"} <= set(tags["histograms"])
    pos = acc.Histograms("eval/test/pair_distance/positive")
    neg = acc.Histograms("eval/test/pair_distance/negative")
    steps = _steps(logged_run)
    assert [e.step for e in pos] == [0, steps]  # at the global step of each evaluation
    last_pos, last_neg = pos[-1].histogram_value, neg[-1].histogram_value
    assert last_pos.num == last_neg.num == 20_000
    assert last_pos.sum / last_pos.num < last_neg.sum / last_neg.num
    assert last_pos.min >= 0 and last_neg.max <= 2.0 + 1e-5  # unit-norm embeddings
    # OPIS utility curves as an image per evaluation.
    images = acc.Images("eval/test/figure/opis_utility")
    assert len(images) == 2 and images[0].encoded_image_string.startswith(b"\x89PNG")
    assert [e.step for e in images] == [0, steps]


def _steps(run_dir):
    import json

    return json.loads((run_dir / "results.json").read_text())["steps"]


@pytest.mark.slow
def test_every_tensorboard_scalar_uses_the_global_step(logged_run):
    acc = _events(logged_run / "tb")
    steps = _steps(logged_run)
    assert steps > 1
    scalars = set(acc.Tags()["scalars"])
    # Evaluations at the step after which they ran (0: the untrained model), on the axis of the training curves.
    assert [e.step for e in acc.Scalars("eval/test/recall@1")] == [0, steps]
    assert [e.step for e in acc.Scalars("train/loss/total")] == list(range(1, steps + 1))  # log_every = 1
    for tag in scalars - {"epoch"}:
        assert all(0 <= e.step <= steps for e in acc.Scalars(tag)), tag
    # The epoch is a scalar of its own, one point per logged step.
    epoch = {e.step: e.value for e in acc.Scalars("epoch")}
    assert len(epoch) == len(acc.Scalars("epoch"))
    assert epoch[0] == 0 and epoch[steps] == 1 and all(epoch[s] == 1 for s in range(1, steps + 1))
    # Bookkeeping counts are text beside the evaluation, not a curve beside the metrics.
    assert not any(tag.endswith("excluded_queries") for tag in scalars)
    texts = acc.Tensors("eval/test/counts/text_summary")
    assert [e.step for e in texts] == [0, steps]
    assert "excluded_queries | 0" in texts[-1].tensor_proto.string_val[0].decode()


@pytest.mark.slow
def test_hparams_and_projector_read_back(logged_run):
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = _events(logged_run / "tb")
    content = acc.PluginTagToContent("hparams")
    session = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    hparams = session.session_start_info.hparams
    assert hparams["loss.name"].string_value == "multi_similarity"
    assert hparams["run.epochs"].number_value == 1
    assert hparams["counts/test/excluded_queries"].number_value == 0
    assert not any("excluded_queries" in tag for tag in acc.Tags()["scalars"])
    assert "hparams/final/test/recall@1" in acc.Tags()["scalars"]
    final = acc.Scalars("hparams/final/test/recall@1")[-1].value
    import json

    results = json.loads((logged_run / "results.json").read_text())
    assert final == pytest.approx(results["metrics"]["recall@1"], abs=1e-6)
    # Projector: config, 50 embeddings with a header line of metadata, sprite of thumbnails.
    config = (logged_run / "tb" / "projector_config.pbtxt").read_text()
    assert 'tensor_name: "test_embeddings:' in config and "sprite" in config
    folder = next(p for p in (logged_run / "tb").iterdir() if p.is_dir() and (p / "test_embeddings").is_dir())
    meta = (folder / "test_embeddings" / "metadata.tsv").read_text().splitlines()
    assert meta[0] == "label\tclass" and len(meta) == 51
    vectors = np.loadtxt(folder / "test_embeddings" / "tensors.tsv")
    assert vectors.shape == (50, 16)
    assert (folder / "test_embeddings" / "sprite.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_record_keeper_writes_csv_and_sqlite(logged_run):
    folder = logged_run / "record_keeper"
    with open(folder / "miner_MultiSimilarityMiner.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) >= 2 and all(int(r["num_pos_pairs"]) > 0 and int(r["num_neg_pairs"]) > 0 for r in rows)
    assert [int(r["~iteration~"]) for r in rows] == list(range(1, len(rows) + 1))
    db = sqlite3.connect(folder / "logs.db")
    try:
        (count,) = db.execute("select count(*) from miner_MultiSimilarityMiner").fetchone()
        epochs = [row[0] for row in db.execute("select [~iteration~] from eval_test order by 1")]
        recall = db.execute("select [recall@1] from eval_test").fetchall()
    finally:
        db.close()
    assert count == len(rows) and epochs == [0, 1] and all(0 <= r[0] <= 1 for r in recall)
    # Statistics PML keeps only with collect_stats: the logger switched it on (unit-norm embeddings: norm 1).
    with open(folder / "loss_distance_CosineSimilarity.csv") as handle:
        norms = [float(r["initial_avg_query_norm"]) for r in csv.DictReader(handle)]
    assert norms and all(n == pytest.approx(1.0) for n in norms)


def test_enabling_statistics_keeps_the_random_streams():
    import random

    import torch
    from pytorch_metric_learning.losses import AngularLoss

    from dmlplug_builtins.loggers.record_keeper_logger import enable_pml_stats

    loss = AngularLoss()
    assert not loss.collect_stats and "average_angle" not in getattr(loss, "_record_these_stats", [])

    def rebuild():
        torch.rand(5), np.random.rand(3), random.random()  # a factory that draws random numbers
        return AngularLoss()

    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    expected = (torch.rand(2), np.random.rand(2), random.random())
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    assert enable_pml_stats(loss, rebuild) >= 2  # the loss, its distance, its reducer
    got = (torch.rand(2), np.random.rand(2), random.random())
    assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1]) and got[2] == expected[2]
    assert loss.collect_stats and loss._record_these_stats == ["average_angle"]
    assert "initial_avg_query_norm" in loss.distance._record_these_stats
    loss(torch.nn.functional.normalize(torch.randn(8, 4), dim=1), torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]))
    assert loss.average_angle > 0
