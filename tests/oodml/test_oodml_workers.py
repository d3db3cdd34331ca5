"""``dmlplug oodml run --worker``: the (split, seed) runs of one ooDML sweep shared by several processes on the
grid engine of ``dmlplug tune`` (issue #28 item 4), with the sweep directory's layout and ``oodml summarize``
unchanged; on the journal file and on a real PostgreSQL server started here (tests/shared/postgres.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from e2e import TINY_RECIPE
from postgres import postgres_server, server_binaries

from dmlplug_builtins.oodml.splitfile import OodSplit, SplitFile, save_splits
from dmlplug_builtins.oodml.sweep import STUDY, run_directory, run_sweep
from dmlplug_builtins.tune.grid import open_storage, outcomes

State = optuna.trial.TrialState


def glyph_splits(path):
    import dmlplug

    bundle = dmlplug.create("dataset", "glyphs", num_classes=40, images_per_class=8)
    names = bundle.train.class_names + bundle.test.class_names
    splits = [OodSplit(id=1, fid=1.0, train=names[:20], test=names[20:], split_train=names[:15],
                       split_val=names[15:20], episodes={}),
              OodSplit(id=2, fid=2.0, train=names[:24], test=names[24:], split_train=names[:18],
                       split_val=names[18:24], episodes={})]
    return save_splits(path, SplitFile(splits=splits))


def study_of(sweep_dir):
    return optuna.load_study(study_name=STUDY, storage=open_storage(Path(sweep_dir), None))


def test_two_workers_share_the_splits_and_seeds_of_one_sweep(tmp_path):
    splits = glyph_splits(tmp_path / "s.json")
    recipe = tmp_path / "r.toml"
    recipe.write_text(TINY_RECIPE)
    sweep = tmp_path / "sweep"
    command = [sys.executable, "-m", "dmlplug", "oodml", "run", str(recipe), "--splits", str(splits), "--seeds",
               "0,1", "--out", str(sweep), "--device", "cpu", "--worker"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    workers = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
               for _ in range(2)]
    outputs = [w.communicate(timeout=900)[0] for w in workers]
    assert all(w.returncode == 0 for w in workers), outputs
    standing = outcomes(study_of(sweep).get_trials())
    cells = {f"split-{i:02d}/seed-{s}" for i in (1, 2) for s in (0, 1)}
    assert set(standing) == cells and all(t.state == State.COMPLETE for t in standing.values())
    assert len({t.user_attrs["worker"] for t in standing.values()}) == 2  # both workers trained runs
    trained = sum(o.count(": finished") for o in outputs)
    assert trained == 4  # each (split, seed) once, over both workers
    for split in (1, 2):
        for seed in (0, 1):
            results = json.loads((run_directory(sweep, split, seed) / "results.json").read_text())
            assert results["status"] == "completed"
            assert standing[f"split-{split:02d}/seed-{seed}"].user_attrs["metric:recall@1"] == \
                results["metrics"]["recall@1"]
    assert json.loads((sweep / "sweep.json").read_text())["seeds"] == [0, 1]
    summary = subprocess.run([sys.executable, "-m", "dmlplug", "oodml", "summarize", str(sweep), "--json",
                              "--no-plot", "--no-tensorboard"], capture_output=True, text=True, env=env,
                             timeout=300)
    assert summary.returncode == 0, summary.stderr
    summarized = json.loads(summary.stdout)
    assert [(r["id"], r["seeds"]) for r in summarized["splits"]] == [(1, [0, 1]), (2, [0, 1])]
    assert summarized["missing_runs"] == []


def test_worker_runs_keep_the_layout_record_failures_and_meet_plain_runs(tmp_path):
    splits = [OodSplit(id=i, fid=float(i), train=["a", "b"], test=["c", "d"], split_train=["a"], split_val=["b"],
                       episodes={}) for i in (1, 2)]
    split_path = save_splits(tmp_path / "s.json", SplitFile(splits=splits))
    recipe = tmp_path / "r.toml"
    recipe.write_text(TINY_RECIPE)
    sweep = tmp_path / "sweep"
    calls = []

    def runner(recipe_path, overrides, *, out, device, quiet):
        split = Path(recipe_path).parent.name
        seed = int(overrides[-1].removeprefix("run.seed="))
        calls.append((split, seed))
        Path(out).mkdir(parents=True)
        status = "failed" if (split, seed) == ("split-02", 1) else "completed"
        (Path(out) / "results.json").write_text(json.dumps({"status": status, "metrics": {"recall@1": 0.25}}))

    options = {"seeds": [0, 1], "sweep_dir": sweep, "runner": runner, "echo": lambda _: None, "check_data": False}
    report = run_sweep(recipe, split_path, worker=True, **options)
    assert sorted(calls) == [(f"split-0{i}", s) for i in (1, 2) for s in (0, 1)]
    assert sorted(report.ran) == [(1, 0), (1, 1), (2, 0)]
    standing = outcomes(study_of(sweep).get_trials())
    assert standing["split-02/seed-1"].state == State.FAIL
    assert "ended failed" in standing["split-02/seed-1"].user_attrs["fail_reason"]
    assert (sweep / "journal.log").is_file() and (sweep / "split-01" / "recipe.toml").is_file()
    calls.clear()
    assert run_sweep(recipe, split_path, worker=True, **options).ran == [] and calls == []  # nothing twice
    # The plain command over the same directory trains what no worker completed, as it always did.
    report = run_sweep(recipe, split_path, **options)
    assert calls == [("split-02", 1)] and report.restarted == [(2, 1)] and len(report.skipped) == 3


@pytest.mark.skipif(server_binaries() is None, reason="PostgreSQL server binaries (initdb, pg_ctl) are not installed")
def test_two_machines_share_one_sweep_through_postgresql(tmp_path):
    """Two workers with their own --out directories (two machines) and one database: every (split, seed) is
    trained once, in the directory of the worker that took it."""
    splits = glyph_splits(tmp_path / "s.json")
    recipe = tmp_path / "r.toml"
    recipe.write_text(TINY_RECIPE)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with postgres_server() as url:
        workers = [subprocess.Popen([sys.executable, "-m", "dmlplug", "oodml", "run", str(recipe), "--splits",
                                     str(splits), "--seeds", "0,1", "--out", str(tmp_path / f"machine-{m}"),
                                     "--device", "cpu", "--worker", "--storage", url],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
                   for m in (1, 2)]
        outputs = [w.communicate(timeout=900)[0] for w in workers]
        assert all(w.returncode == 0 for w in workers), outputs
        standing = outcomes(optuna.load_study(study_name=STUDY, storage=open_storage(tmp_path, url)).get_trials())
    cells = {f"split-{i:02d}/seed-{s}" for i in (1, 2) for s in (0, 1)}
    assert set(standing) == cells and all(t.state == State.COMPLETE for t in standing.values())
    trained = {m: {c for c in cells if (tmp_path / f"machine-{m}" / c / "results.json").is_file()} for m in (1, 2)}
    assert trained[1] | trained[2] == cells and not trained[1] & trained[2] and trained[1] and trained[2]
    assert not (tmp_path / "machine-1" / "journal.log").exists()
