"""Trials that other workers are running count towards ``--trials`` (no worker adds one past it), and the command
that reproduces the best waits for them to end first."""

import threading
import time

import optuna
from tiny import scoring_runner, write_tiny

from dmlplug_builtins.tune.report import load
from dmlplug_builtins.tune.study import counted
from dmlplug_builtins.tune.tune import tune

State = optuna.trial.TrialState


def test_running_trials_of_other_workers_count_and_the_reproducing_command_waits_for_them(tmp_path):
    space = write_tiny(tmp_path)
    tune_dir = tmp_path / "t"
    lines = []
    options = {"runner": scoring_runner, "echo": lines.append, "poll": 0.05}
    tune(space, tune_dir, trials=1, **options)
    _, study = load(tune_dir, None)
    elsewhere = study.ask()  # a trial another (live) worker is running: it carries no mark of a dead process

    tune(space, tune_dir, trials=3, **options)  # 1 counted + 1 running elsewhere: one more trial makes 3
    assert [t.state for t in study.get_trials()] == [State.COMPLETE, State.RUNNING, State.COMPLETE]

    told = []

    def other_worker_finishes():
        time.sleep(0.5)
        told.append(time.time())
        study.tell(elsewhere, 0.0)

    finisher = threading.Thread(target=other_worker_finishes)
    finisher.start()
    tune(space, tune_dir, trials=3, reproductions=1, **options)
    finisher.join()
    summary = tune_dir / "reproductions" / "summary.json"
    assert "waiting for 1 trial(s) of other workers to end" in lines
    assert summary.stat().st_mtime >= told[0] - 0.01  # reproduced after the other trial ended (10 ms of clock slack)
    assert len(study.get_trials()) == 3 and counted(study) == 3  # no trial past --trials
