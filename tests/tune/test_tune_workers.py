"""Several ``dmlplug tune run --worker`` processes on one study: the embedded journal file (with a worker SIGKILLed
mid-trial and the study resumed) and a real PostgreSQL server started here (issue #28 items 4 and 7), where a
worker lost on another machine is found through its stopped heartbeat."""

import json
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from postgres import postgres_server, server_binaries
from tiny import Scored, registry, write_tiny

from dmlplug_builtins.tune.report import load
from dmlplug_builtins.tune.study import counted

State = optuna.trial.TrialState
#: The database password of the shared-study test: it must reach no file.
PASSWORD = "s3cret-pw-4711"


def worker(space, tune_dir, trials, *extra):
    """Start one worker process (one torch thread: two share the test machine's cores)."""
    return subprocess.Popen([sys.executable, "-m", "dmlplug", "tune", "run", str(space), "--dir", str(tune_dir),
                             "--trials", str(trials), "--worker", *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


def finish(process):
    output, _ = process.communicate(timeout=900)
    assert process.returncode == 0, output
    return output


def test_killed_worker_then_two_workers_on_the_journal(tmp_path):
    space = write_tiny(tmp_path)
    tune_dir = tmp_path / "t"
    first = worker(space, tune_dir, 2)
    started = tune_dir / "trials" / "trial-0000" / "fold-0" / "recipe.resolved.toml"
    deadline = time.monotonic() + 600
    while not started.exists():  # the run directory appears once the fold run has been built: mid-trial
        assert first.poll() is None and time.monotonic() < deadline, first.stdout.read() if first.stdout else ""
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.wait()
    outputs = [finish(p) for p in [worker(space, tune_dir, 2), worker(space, tune_dir, 2)]]
    assert sum("trial 0: its worker died" in o for o in outputs) == 1  # recovered by exactly one worker
    _, study = load(tune_dir, None)
    trials = study.get_trials()
    lost = trials[0]
    assert lost.state == State.FAIL and lost.user_attrs["fail_reason"] == f"worker {lost.user_attrs['worker']} died"
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == 0]
    assert len(retries) == 1 and retries[0].state == State.COMPLETE and retries[0].params == lost.params
    assert all(t.state == State.COMPLETE for t in trials[1:])
    # Two counted trials (a trial running elsewhere counts, so no worker adds a third), the lost one not among them.
    assert counted(study) == len(trials) - 1 == 2
    workers = {t.user_attrs["worker"] for t in trials[1:]}
    assert len(workers) == 2 and lost.user_attrs["worker"] not in workers  # both new workers took trials
    for t in trials[1:]:  # every counted trial trained each fold once, in its own run directory
        folder = tune_dir / "trials" / f"trial-{t.number:04d}"
        assert sorted(p.name for p in folder.iterdir()) == ["fold-0", "fold-1"]


@pytest.mark.skipif(server_binaries() is None, reason="PostgreSQL server binaries (initdb, pg_ctl) are not installed")
def test_two_workers_share_a_study_on_postgresql_and_its_password_is_written_nowhere(tmp_path):
    space = write_tiny(tmp_path)
    with postgres_server() as bare:
        # The server trusts local connections, so any password is accepted: the URL carries one as a user's would.
        url = bare.replace("postgresql://dmlplug@", f"postgresql://dmlplug:{PASSWORD}@")
        outputs = [finish(p) for p in [worker(space, tmp_path / "t", 2, "--storage", url),
                                       worker(space, tmp_path / "t", 2, "--storage", url)]]
        _, study = load(tmp_path / "t", url)
        trials = study.get_trials()
        assert len(trials) == 2 and all(t.state == State.COMPLETE for t in trials)
        assert len({t.user_attrs["worker"] for t in trials}) == 2, outputs
        assert not (tmp_path / "t" / "journal.log").exists()  # the database holds the study, not the directory
    # Every file of the study tree (environment.json's command lines, manifests, logs, TensorBoard events …) and
    # the console: the password appears in none of them, masked where the URL is recorded.
    files = [p for p in (tmp_path / "t").rglob("*") if p.is_file()]
    leaked = [str(p.relative_to(tmp_path)) for p in files if PASSWORD.encode() in p.read_bytes()]
    assert not leaked and not any(PASSWORD in o for o in outputs), leaked
    commands = [json.loads(p.read_text())["command"] for p in files if p.name == "environment.json"]
    assert commands and all("postgresql://dmlplug:***@127.0.0.1" in " ".join(c) for c in commands)


@pytest.mark.skipif(server_binaries() is None, reason="PostgreSQL server binaries (initdb, pg_ctl) are not installed")
@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")  # our ask()
def test_a_worker_lost_on_another_machine_is_found_by_its_heartbeat(tmp_path, monkeypatch):
    # Another machine's worker: its process id means nothing here, only its stopped heartbeat tells it is gone.
    from dmlplug_builtins.tune import study as study_module
    from dmlplug_builtins.tune.study import TAKEN_ATTR, WORKER_ATTR
    from dmlplug_builtins.tune.tune import tune

    monkeypatch.setattr(study_module, "HEARTBEAT", 1)
    monkeypatch.setattr(study_module, "GRACE", 2)
    space = write_tiny(tmp_path)
    lines = []
    options = {"runner": lambda *a, **k: Scored(0.5), "echo": lines.append}
    with postgres_server() as url:
        study = tune(space, tmp_path / "t", trials=1, registry=registry(), storage=url, **options)
        lost = study.ask()
        for key, value in ((WORKER_ATTR, "elsewhere:4242"), (TAKEN_ATTR, f"elsewhere:4242#{lost.number}")):
            study._storage.set_trial_user_attr(lost._trial_id, key, value)
        study._storage.record_heartbeat(lost._trial_id)
        time.sleep(3)  # past the grace period: the heartbeat has stopped
        study = tune(space, tmp_path / "t", trials=2, registry=registry(), storage=url, **options)
        trials = study.get_trials()
        assert f"trial {lost.number}: its worker died; marked failed and queued again once" in lines
        assert trials[lost.number].state == State.FAIL
        retries = [t for t in trials if t.system_attrs.get("failed_trial") == lost.number]
        assert len(retries) == 1 and retries[0].state == State.COMPLETE
        assert counted(study) == 2 and len(trials) == 3  # the lost trial replaced by its retry, not counted twice


@pytest.mark.skipif(server_binaries() is None, reason="PostgreSQL server binaries (initdb, pg_ctl) are not installed")
def test_workers_starting_together_create_the_tables_one_at_a_time(tmp_path):
    # Without the lock, workers started together on a new database raced to create Optuna's tables and the losers
    # failed (DuplicateTable). Held here, the lock keeps a worker from touching the schema until it is released.
    import threading

    import psycopg

    from dmlplug_builtins.tune.study import SCHEMA_LOCK, open_storage

    def tables(connection):
        return connection.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
                                  ).fetchone()[0]

    with postgres_server() as url, psycopg.connect(url,
                                                   autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))
        opened = []
        opener = threading.Thread(target=lambda: opened.append(open_storage(tmp_path, url)))
        opener.start()
        opener.join(timeout=3)
        assert opener.is_alive() and not opened and tables(holder) == 0  # waiting for the lock, nothing created
        holder.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK,))
        opener.join(timeout=120)
        assert len(opened) == 1 and tables(holder) > 0
        # ... and a second worker that finds the tables made opens the same storage.
        assert open_storage(tmp_path, url) is not None
