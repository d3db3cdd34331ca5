"""Exact resume: a run killed with SIGKILL after a mid-epoch checkpoint, then resumed, ends exactly like an
uninterrupted run (weights, optimizer state, metrics); recipe changes on resume are refused unless forced."""

import json
import subprocess
import sys

import pytest
import torch
from e2e import TINY_RECIPE, run_cli, sigkill_when
from stalling import STALL_AFTER_EVAL

from dmlplug.engine.resume import recipe_diff, trim_metrics

#: Batches of 8 (4 classes x 2 images), 4 steps per epoch, a checkpoint after every step.
SMALL = ["data.dataset.num_classes=40", "data.dataset.images_per_class=4", "data.batch_size=8",
         "data.sampler.m=2", "data.sampler.batches_per_epoch=4", "head.embedding_size=8", "run.epochs=2",
         "run.checkpoint_every_steps=1"]

# Runs the CLI with a plugin that, right after the first mid-epoch checkpoint of epoch 2, writes a marker and
# sleeps: the test then kills the process with SIGKILL at a known point, after the checkpoint.
STALL = """
import sys, time
from pathlib import Path
from dmlplug import hookimpl
from dmlplug.plugins import get_host
from dmlplug.cli import main

class Stall:
    @hookimpl
    def on_checkpoint(self, run, path):
        # The checkpoint after the 2nd of 4 batches of epoch 2 (the view's step counts every batch trained).
        assert run.steps_per_epoch == 4
        if run.epoch == 2 and run.step - (run.epoch - 1) * run.steps_per_epoch == 2:
            Path(sys.argv[1]).write_text(str(run.step))
            time.sleep(600)

get_host().pm.register(Stall(), "stall")
main(sys.argv[2:])
"""


def _set(*pairs):
    return [arg for pair in pairs for arg in ("--set", pair)]


def _tensors_equal(a, b, where=""):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), where
        for key in a:
            _tensors_equal(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _tensors_equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _metrics_lines(run_dir):
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for line in lines:
        line.pop("time")
    return lines


def test_sigkill_then_resume_matches_an_uninterrupted_run(tiny_recipe, tmp_path):
    import dmlplug
    from dmlplug.errors import RunError

    full, killed = tmp_path / "full", tmp_path / "killed"
    dmlplug.run(tiny_recipe, overrides=SMALL, out=full, quiet=True)

    script, marker = tmp_path / "stall.py", tmp_path / "checkpointed"
    script.write_text(STALL)
    child = subprocess.Popen([sys.executable, str(script), str(marker), "run", str(tiny_recipe), "--out",
                              str(killed), "--quiet", *_set(*SMALL)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    sigkill_when(child, marker)
    step = int(marker.read_text())
    state = torch.load(killed / "checkpoints" / "last.pt", weights_only=False)
    assert (state["epoch"], state["epoch_step"], state["step"], state["epoch_complete"]) == (2, 2, step, False)
    assert not (killed / "results.json").exists()

    # A changed recipe is refused and leaves the run untouched.
    with pytest.raises(RunError, match="--force") as info:
        dmlplug.run(killed, overrides=["run.epochs=3", "optimizer.lr=0.01"])
    assert "run.epochs: 2 -> 3" in str(info.value) and "optimizer.lr" in str(info.value)
    assert not (killed / "resume.jsonl").exists()

    result = dmlplug.run(killed, resume=True, quiet=True)
    assert result.status == "completed"

    a = torch.load(full / "checkpoints" / "last.pt", weights_only=False)
    b = torch.load(killed / "checkpoints" / "last.pt", weights_only=False)
    for key in ("model", "optimizer", "scheduler", "loss", "best", "epoch", "step", "last_metrics"):
        _tensors_equal(a[key], b[key], key)
    ra, rb = (json.loads((d / "results.json").read_text()) for d in (full, killed))
    assert ra == rb and rb["status"] == "completed"
    assert _metrics_lines(full) == _metrics_lines(killed)
    record = json.loads((killed / "resume.jsonl").read_text())
    assert (record["from_step"], record["recipe_changes"], record["forced"]) == (step, [], False)

    # Completed: nothing to resume without a change; --force with more epochs continues and records the change.
    with pytest.raises(RunError, match="nothing to resume"):
        dmlplug.run(killed, resume=True)
    dmlplug.run(killed, overrides=["run.epochs=3"], resume=True, force=True, quiet=True)
    records = [json.loads(line) for line in (killed / "resume.jsonl").read_text().splitlines()]
    assert records[-1]["forced"] and records[-1]["recipe_changes"] == [{"key": "run.epochs", "old": 2, "new": 3}]
    assert json.loads((killed / "results.json").read_text())["epochs_completed"] == 3
    assert "epochs = 3" in (killed / "recipe.resolved.toml").read_text()


def test_cli_resume_refuses_a_changed_recipe(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    import dmlplug

    (run_dir / "recipe.resolved.toml").write_text(dmlplug.validate(tiny_toml(tmp_path)).dumps())
    proc = run_cli("run", run_dir, "--resume", "--set", "run.seed=3")
    assert proc.returncode == 2 and "run.seed: 0 -> 3" in proc.stderr, proc.stderr


def tiny_toml(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text(TINY_RECIPE)
    return path


def test_resume_of_a_recipe_finds_its_latest_run(tiny_recipe, tmp_path):
    import dmlplug

    overrides = [*SMALL, "run.epochs=1", f"run.output_dir={tmp_path / 'runs'}", "evaluation.initial=false"]
    first = dmlplug.run(tiny_recipe, overrides=overrides, quiet=True)
    ckpt = first.directory / "checkpoints" / "last.pt"
    state = torch.load(ckpt, weights_only=False)
    assert state["epoch_complete"] and state["epoch"] == 1
    again = dmlplug.run(tiny_recipe, overrides=[*overrides, "run.epochs=2"], resume=True, force=True, quiet=True)
    assert again.directory == first.directory and again.status == "completed"
    assert json.loads((first.directory / "results.json").read_text())["epochs_completed"] == 2


def test_resume_errors_are_clear(tiny_recipe, tmp_path):
    import dmlplug
    from dmlplug.errors import RunError

    with pytest.raises(RunError, match="no run of 'tiny' with a checkpoint"):
        dmlplug.run(tiny_recipe, overrides=[f"run.output_dir={tmp_path}"], resume=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "recipe.resolved.toml").write_text(dmlplug.validate(tiny_recipe).dumps())
    with pytest.raises(RunError, match="nothing to resume"):
        dmlplug.run(empty, resume=True)


def test_recipe_diff_names_changed_added_and_removed_keys():
    old = 'a = 1\n[run]\nepochs = 2\n[[evaluators]]\nname = "recall"\nk = [1]\n'
    new = 'b = 1\n[run]\nepochs = 3\n[[evaluators]]\nname = "recall"\nk = [1, 2]\n'
    assert recipe_diff(old, new) == [
        {"key": "a", "old": 1, "new": None},
        {"key": "b", "old": None, "new": 1},
        {"key": "evaluators[0].k", "old": [1], "new": [1, 2]},
        {"key": "run.epochs", "old": 2, "new": 3},
    ]
    assert recipe_diff(old, old) == []


def test_trim_metrics_drops_records_after_the_checkpoint(tmp_path):
    lines = [{"epoch": 0, "step": 0}, {"epoch": 1, "step": 4}, {"epoch": 2, "step": 8}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"epoch": 3, "st')
    trim_metrics(tmp_path, 5)
    assert [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == lines[:2]


@pytest.mark.parametrize("name", ["m_per_class", "class_random", "random", "class_balanced", "hierarchical"])
def test_every_builtin_sampler_resumes_mid_epoch_at_the_same_batches(name):
    import numpy as np

    import dmlplug
    from dmlplug.engine.batches import BatchPlan

    labels = np.repeat(np.arange(12), 5)
    supers = labels // 4
    sampler = dmlplug.create("samplers", name, train_labels=labels, batch_size=8, seed=4, train_super_labels=supers)
    plan = BatchPlan(sampler)
    plan.set_epoch(3)
    whole = list(plan)
    assert len(whole) == len(sampler) == 7 and all(len(b) == 8 for b in whole)
    fresh = BatchPlan(dmlplug.create("samplers", name, train_labels=labels, batch_size=8, seed=4,
                                     train_super_labels=supers))
    fresh.set_epoch(3, skip=5)
    assert len(fresh) == 2 and list(fresh) == whole[5:]
    fresh.set_epoch(2)
    assert list(fresh) != whole  # another epoch, other batches


LOGGED = TINY_RECIPE.replace("[optimizer]", '[miner]\nname = "multi_similarity"\n[optimizer]') + """
[[loggers]]
name = "tensorboard"
histograms = false
figures = false
projector = false
hparams = false
[[loggers]]
name = "record_keeper"
every = 1
"""


def _csv_rows(run_dir):
    import csv

    return {path.name: list(csv.reader(path.open())) for path in sorted((run_dir / "record_keeper").glob("*.csv"))}


def _db_rows(run_dir):
    import sqlite3

    db = sqlite3.connect(run_dir / "record_keeper" / "logs.db")
    try:
        tables = [row[0] for row in db.execute("select name from sqlite_master where type = 'table' "
                                               "and name not like 'sqlite_%' order by name")]
        # every column but the autoincrement id, in insertion order
        return {t: [row[1:] for row in db.execute(f"select * from [{t}] order by id")] for t in tables}
    finally:
        db.close()


def _scalars(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, round(e.value, 5)) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.mark.slow
@pytest.mark.parametrize("stall", [STALL, STALL_AFTER_EVAL], ids=["mid-epoch", "after-evaluation"])
def test_logs_after_a_kill_and_a_resume_match_an_uninterrupted_run(tmp_path, stall):
    """Record-keeper CSV/SQLite rows and TensorBoard scalars: none twice, none missing.

    Killed mid-epoch, rows up to the checkpoint must be on disk; killed after an evaluation that followed the
    last checkpoint, the rows and events past it must go (the resumed run writes them again).
    """
    import dmlplug

    recipe = tmp_path / "logged.toml"
    recipe.write_text(LOGGED)
    overrides = [*SMALL, "run.log_every=1"]
    full, killed = tmp_path / "full", tmp_path / "killed"
    dmlplug.run(recipe, overrides=overrides, out=full, quiet=True)

    script, marker = tmp_path / "stall.py", tmp_path / "checkpointed"
    script.write_text(stall)
    child = subprocess.Popen([sys.executable, str(script), str(marker), "run", str(recipe), "--out", str(killed),
                              "--quiet", *_set(*overrides)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    sigkill_when(child, marker)
    assert dmlplug.run(killed, resume=True, quiet=True).status == "completed"

    expected = _csv_rows(full)
    assert "miner_MultiSimilarityMiner.csv" in expected and "eval_test.csv" in expected
    assert [int(r[0]) for r in expected["miner_MultiSimilarityMiner.csv"][1:]] == list(range(1, 9))
    assert _csv_rows(killed) == expected  # no row twice, none missing
    assert _db_rows(killed) == _db_rows(full)
    scalars = _scalars(full)
    assert [s for s, _ in scalars["train/loss/total"]] == list(range(1, 9))
    assert [s for s, _ in scalars["train/pml/miner_MultiSimilarityMiner/num_pos_pairs"]] == list(range(1, 9))
    assert _scalars(killed) == scalars
