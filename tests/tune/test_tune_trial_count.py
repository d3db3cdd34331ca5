"""Trials that other workers are running count towards ``--trials`` (no worker adds one past it), and the command
that reproduces the best waits for them to end first."""

import threading
import time

import optuna
import pytest
from tiny import registry, scoring_runner, write_tiny

from dmlplug_builtins.tune.report import load
from dmlplug_builtins.tune.study import counted
from dmlplug_builtins.tune.tune import tune

State = optuna.trial.TrialState
WAITING = "waiting for 1 trial(s) of other workers to end"


def test_running_trials_of_other_workers_count_and_the_reproducing_command_waits_for_them(tmp_path):
    space = write_tiny(tmp_path)
    tune_dir = tmp_path / "t"
    lines = []
    options = {"runner": scoring_runner, "echo": lines.append, "poll": 0.05}
    tune(space, tune_dir, trials=1, registry=registry(), **options)
    _, study = load(tune_dir, None)
    elsewhere = study.ask()  # a trial another (live) worker is running: it carries no mark of a dead process

    tune(space, tune_dir, trials=3, registry=registry(),
         **options)  # 1 counted + 1 running elsewhere: one more trial makes 3
    assert [t.state for t in study.get_trials()] == [State.COMPLETE, State.RUNNING, State.COMPLETE]

    told = []

    def other_worker_finishes():
        # ends its trial once the command says it waits (a fixed delay raced the command's start-up on a busy
        # machine); a command that never waited would have reproduced long before the deadline
        deadline = time.time() + 120
        while WAITING not in lines and time.time() < deadline:
            time.sleep(0.01)
        told.append(time.time())
        study.tell(elsewhere, 0.0)

    finisher = threading.Thread(target=other_worker_finishes)
    finisher.start()
    tune(space, tune_dir, trials=3, registry=registry(), reproductions=1, **options)
    finisher.join()
    summary = tune_dir / "reproductions" / "summary.json"
    assert WAITING in lines
    assert summary.stat().st_mtime >= told[0] - 0.01  # reproduced after the other trial ended (10 ms of clock slack)
    assert len(study.get_trials()) == 3 and counted(study) == 3  # no trial past --trials


def test_a_new_directory_another_worker_is_claiming_is_not_someone_elses(tmp_path):
    # Workers started together on a new --dir: one is writing the manifest (its temporary file is all there is)
    # when the other looks. That directory is free for the search; anything else in it without a manifest is not.
    from dmlplug.errors import RunError
    from dmlplug.files import free_for

    folder = tmp_path / "t"
    assert free_for(folder, "tune.json")
    folder.mkdir()
    (folder / ".tune.json.k2j3.tmp").write_text("{")
    assert free_for(folder, "tune.json")
    space = write_tiny(tmp_path)
    tune(space, folder, trials=1, registry=registry(), runner=scoring_runner, echo=lambda _: None)
    (tmp_path / "u").mkdir()
    (tmp_path / "u" / "recipe.toml").write_text("")
    assert not free_for(tmp_path / "u", "tune.json")
    with pytest.raises(RunError, match="is not empty and is not a tune search directory"):
        tune(space, tmp_path / "u", trials=1, registry=registry(), runner=scoring_runner, echo=lambda _: None)
