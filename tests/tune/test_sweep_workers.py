"""Several ``dmlplug sweep run --worker`` processes on one grid, on the embedded journal file and on a real
PostgreSQL server started here: a worker SIGKILLed mid-run, then two workers that finish the sweep with every
(configuration, seed) trained exactly once and the lost run retried once (issue #28 items 4, 5 and 7)."""

import json
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from postgres import postgres_server, server_binaries
from tiny import RECIPE

from dmlplug_builtins.tune.grid import CELL_ATTR, DUPLICATE_ATTR, METRIC_PREFIX, outcomes, retried_numbers
from dmlplug_builtins.tune.sweep_report import load

State = optuna.trial.TrialState
SWEEP = """
recipe = "recipe.toml"
[sweep]
seeds = [0, 1]
[params."loss.alpha"]
type = "categorical"
choices = [1.0, 2.0]
"""
CELLS = {f"runs/loss.alpha={a}/seed-{s}" for a in (1.0, 2.0) for s in (0, 1)}


def worker(path, sweep_dir, *extra):
    """One worker process (one torch thread: two share the test machine's cores)."""
    return subprocess.Popen([sys.executable, "-m", "dmlplug", "sweep", "run", str(path), "--dir", str(sweep_dir),
                             "--worker", *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


def finish(process):
    output, _ = process.communicate(timeout=900)
    assert process.returncode == 0, output
    return output


def kill_mid_run(process, sweep_dir):
    """SIGKILL the worker once its first run has been built (its run directory holds the resolved recipe)."""
    deadline = time.monotonic() + 600
    while not list((sweep_dir / "runs").glob("*/seed-*/recipe.resolved.toml")):
        assert process.poll() is None and time.monotonic() < deadline, process.stdout.read() if process.stdout else ""
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()


def check_exactly_once(study, sweep_dir):
    """Every cell complete once; the lost run failed with its reason and retried once; duplicates untrained."""
    trials = study.get_trials()
    standing = outcomes(trials)
    assert set(standing) == CELLS and all(t.state == State.COMPLETE for t in standing.values())
    lost = [t for t in trials if t.state == State.FAIL and DUPLICATE_ATTR not in t.user_attrs]
    assert len(lost) == 1 and lost[0].user_attrs["fail_reason"] == f"worker {lost[0].user_attrs['worker']} died"
    assert retried_numbers(trials) == {lost[0].number}
    retry = [t for t in trials if t.system_attrs.get("failed_trial") == lost[0].number]
    assert len(retry) == 1 and standing[lost[0].user_attrs[CELL_ATTR]].number == retry[0].number
    for trial in trials:  # a dropped duplicate was never trained: no metrics, no worker of its own
        if DUPLICATE_ATTR in trial.user_attrs:
            assert not any(k.startswith(METRIC_PREFIX) for k in trial.user_attrs)
    workers = {t.user_attrs["worker"] for t in standing.values()}
    assert len(workers) == 2 and lost[0].user_attrs["worker"] not in workers  # both new workers trained runs
    for name, trial in standing.items():
        results = json.loads((sweep_dir / name / "results.json").read_text())
        assert results["status"] == "completed"
        assert trial.user_attrs[METRIC_PREFIX + "map@r"] == results["metrics"]["map@r"]


def two_workers_after_a_kill(tmp_path, *extra):
    (tmp_path / "recipe.toml").write_text(RECIPE)
    path = tmp_path / "tiny.sweep.toml"
    path.write_text(SWEEP)
    sweep_dir = tmp_path / "s"
    kill_mid_run(worker(path, sweep_dir, *extra), sweep_dir)
    outputs = [finish(p) for p in [worker(path, sweep_dir, *extra), worker(path, sweep_dir, *extra)]]
    assert sum(o.count("its worker died") for o in outputs) == 1, outputs  # recovered by exactly one worker
    return path, sweep_dir


def test_a_killed_worker_then_two_workers_on_the_journal(tmp_path):
    path, sweep_dir = two_workers_after_a_kill(tmp_path)
    _, study = load(sweep_dir, None)
    check_exactly_once(study, sweep_dir)
    # A restarted command finds nothing to do; the report has both configurations with their two seeds.
    rerun = subprocess.run([sys.executable, "-m", "dmlplug", "sweep", "run", str(path), "--dir", str(sweep_dir)],
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0 and "this process trained 0" in rerun.stdout, rerun.stderr
    report = subprocess.run([sys.executable, "-m", "dmlplug", "sweep", "report", str(sweep_dir)],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    assert "| loss.alpha=1.0 | 2 | 0 | 0 |" in report.stdout and "| loss.alpha=2.0 | 2 | 0 | 0 |" in report.stdout


@pytest.mark.skipif(server_binaries() is None, reason="PostgreSQL server binaries (initdb, pg_ctl) are not installed")
def test_a_killed_worker_then_two_workers_on_postgresql(tmp_path):
    with postgres_server() as url:
        _, sweep_dir = two_workers_after_a_kill(tmp_path, "--storage", url)
        _, study = load(sweep_dir, url)
        check_exactly_once(study, sweep_dir)
        assert not (sweep_dir / "journal.log").exists()  # the database holds the sweep, not the directory
