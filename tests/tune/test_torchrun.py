"""Trials as torchrun jobs (``dmlplug tune run --nproc-per-node 2``, issue #28 item 4): 2 gloo ranks on CPU per fold
run; the objective is the mean of the folds' results.json, pruning stops the job, a failed job is the trial's
fail_reason, a killed worker takes its job with it and the study resumes."""

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from tiny import registry, write_tiny

from dmlplug.errors import RecipeError
from dmlplug_builtins.tune.launch import MetricsTail, TorchrunRunner
from dmlplug_builtins.tune.report import load
from dmlplug_builtins.tune.tune import tune

State = optuna.trial.TrialState


def cli(space, tune_dir, *extra):
    return subprocess.Popen([sys.executable, "-m", "dmlplug", "tune", "run", str(space), "--dir", str(tune_dir),
                             "--nproc-per-node", "2", *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


def processes_naming(text):
    """Process ids whose command line contains ``text`` (a run directory: the ranks and agent of its job)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def wait_for(condition, process, seconds=600):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline and (process is None or process.poll() is None), \
            process.stdout.read() if process and process.stdout else "timed out"
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG are Linux's")
def test_folds_as_torchrun_jobs_a_killed_worker_takes_its_job_and_the_study_resumes(tmp_path):
    space = write_tiny(tmp_path)
    tune_dir = tmp_path / "t"
    first = cli(space, tune_dir, "--trials", "1", "--worker")
    lost_fold = tune_dir / "trials" / "trial-0000" / "fold-0"
    wait_for(lambda: (lost_fold / "recipe.resolved.toml").exists(), first)  # rank 0 has built the run: mid-job
    assert processes_naming(str(lost_fold))
    first.send_signal(signal.SIGKILL)
    first.wait()
    wait_for(lambda: not processes_naming(str(lost_fold)), None, seconds=60)  # agent and ranks follow the worker

    second = cli(space, tune_dir, "--trials", "1")
    output, _ = second.communicate(timeout=900)
    assert second.returncode == 0, output
    assert "trial 0: its worker died" in output
    _, study = load(tune_dir, None)
    lost, retry = study.get_trials()
    assert lost.state == State.FAIL and retry.state == State.COMPLETE and retry.params == lost.params
    folds = [tune_dir / "trials" / "trial-0001" / f"fold-{i}" for i in range(2)]
    scores = []
    for fold in folds:
        results = json.loads((fold / "results.json").read_text())
        assert results["status"] == "completed" and results["selected_on"] == "val"
        scores.append(results["selection_metrics"]["map@r"])
        assert json.loads((fold / "environment.json").read_text())["world_size"] == 2  # a DDP run of 2 ranks
        assert fold.with_name(fold.name + ".torchrun.log").is_file()
    assert retry.value == pytest.approx(statistics.fmean(scores))  # the objective: the folds' results.json mean
    assert [retry.user_attrs["fold_0"], retry.user_attrs["fold_1"]] == scores
    # Rank 0's metrics.jsonl went through the trial's FoldReporter: the running fold mean at steps 1 and 2.
    assert retry.intermediate_values == pytest.approx({1: scores[0], 2: statistics.fmean(scores)})


def fake_runner(value, epochs):
    """A fold run in this process that reports ``value`` after every epoch through the run's hooks."""
    class Result:
        selection_metrics = {"map@r": value}

    def run(recipe, overrides, *, hooks=(), **options):
        for epoch in range(1, epochs + 1):
            for hook in hooks:
                hook.on_eval_end(run=None, epoch=epoch, split="val", metrics={"map@r": value})
        return Result()

    return run


@pytest.mark.slow
def test_a_pruned_trial_stops_its_torchrun_job(tmp_path):
    space = write_tiny(tmp_path)
    space.write_text(space.read_text().replace('pruner = "none"', 'pruner = {name = "median", startup_trials = 1}'))
    sets = ["run.epochs=100"]
    tune(space, tmp_path / "t", trials=1, registry=registry(),
         overrides=sets, runner=fake_runner(1.0, 100), echo=lambda _: None)
    # The second trial runs as a torchrun job: its first epoch is below the perfect first trial, so it is pruned.
    study = tune(space, tmp_path / "t", trials=2, registry=registry(),
                 overrides=sets, nproc_per_node=2, echo=lambda _: None)
    pruned = study.trials[1]
    assert pruned.state == State.PRUNED and list(pruned.intermediate_values) == [1]
    fold = tmp_path / "t" / "trials" / "trial-0001" / "fold-0"
    results = json.loads((fold / "results.json").read_text())
    # Stopped with SIGTERM long before its 100 epochs; the run says it was pruned, and why, as in one process.
    assert results["status"] == "pruned" and results["epochs_completed"] < 100 and "error" not in results
    assert results["reason"].startswith("pruned at fold 0, epoch 1")
    assert not processes_naming(str(fold)) and not fold.with_name("fold-1").exists()


@pytest.mark.slow
def test_a_failed_torchrun_job_is_the_trials_fail_reason(tmp_path):
    space = write_tiny(tmp_path)
    space.write_text(space.read_text().split('[params."optimizer.lr"]')[0] + '[params."loss.alpha"]\n'
                     'type = "float"\nlow = 0.5\nhigh = 4.0\n')
    study = tune(space, tmp_path / "t", trials=1, registry=registry(),
                 overrides=["optimizer.lr=1e30", "run.epochs=2"], nproc_per_node=2,
                 echo=lambda _: None)
    failed = study.trials[0]
    assert failed.state == State.FAIL
    reason = failed.user_attrs["fail_reason"]
    assert reason.startswith("RunError: the torchrun job exited with code 1: loss term 'loss' is nan"), reason


def test_a_batch_that_does_not_divide_into_the_ranks_is_refused_before_training(tmp_path):
    space = write_tiny(tmp_path)
    with pytest.raises(RecipeError, match=r"data.batch_size = 8 \(the global batch\) does not divide into 3"):
        tune(space, tmp_path / "t", trials=1, registry=registry(), nproc_per_node=3, echo=lambda _: None)
    assert not (tmp_path / "t" / "trials").exists()


def test_the_metrics_tail_reads_complete_lines_once(tmp_path):
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    assert list(tail.lines()) == []  # not written yet
    path.write_text('{"epoch": 1, "split": "val"}\n{"epoch": 2, "sp')
    assert list(tail.lines()) == [{"epoch": 1, "split": "val"}]
    with open(path, "a") as handle:
        handle.write('lit": "val"}\n')
    assert list(tail.lines()) == [{"epoch": 2, "split": "val"}]
    assert list(tail.lines()) == []


def test_the_job_command_line():
    command = TorchrunRunner(4).command("r.toml", ["a.b=1"], Path("out"), "cuda", True)
    assert command == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4", "-m",
                       "dmlplug", "run", "r.toml", "--out", "out", "--set", "a.b=1", "--device", "cuda", "--quiet"]
