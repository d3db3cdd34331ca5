"""The Optuna study of a tune directory: storage, the space's sampler and pruner, and the space it belongs to.

Layout of a tune directory::

    TUNE_DIR/
      tune.json                the space file's path, its identity hash, the --set overrides
      recipe.toml              the recipe with its [data.dataset] wrapped in dataset "tune_fold"
      journal.log              the embedded storage (Optuna's JournalStorage, file backend, lock file beside)
      trials/trial-0007/fold-2 an ordinary run directory per trial and fold
      reproductions/seed-0     the best configuration retrained on all training classes (--reproductions)

The embedded storage is safe for several processes on one machine (the journal file is appended under a
file lock). ``--storage postgresql://...`` shares the study between machines (Optuna's RDBStorage with a
heartbeat). Optuna is imported inside the functions: the CLI starts without it.
"""

from __future__ import annotations

import json
import os
import socket
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dmlplug.errors import RunError
from dmlplug.secrets import mask_secrets

STUDY = "dmlplug-tune"
JOURNAL = "journal.log"
#: Seconds between heartbeats of a running trial (database storages), and how old one may get before the trial
#: counts as lost.
HEARTBEAT = 10
GRACE = 30
# The PostgreSQL advisory lock under which a worker creates Optuna's tables (any 64-bit key no one else uses).
SCHEMA_LOCK = 0x646D6C706C7567  # "dmlplug"
#: User attributes of a trial.
WORKER_ATTR = "worker"
#: ``host:pid#number`` of the process that took the trial (:func:`take_mark`).
TAKEN_ATTR = "taken"
REASON_ATTR = "fail_reason"
SPACE_ATTR = "dmlplug_space"


def worker_id() -> str:
    """``host:pid`` of this process: which worker runs a trial."""
    return f"{socket.gethostname()}:{os.getpid()}"


def resolve_study_name(manifest_path: Path, given: str | None, default: str) -> str:
    """The name of a directory's study: ``--study`` (``given``), else the one its manifest records, else ``default``.

    One database holds any number of studies, each under its own name; the name is recorded in the directory's
    manifest, so later commands on the directory (resume, workers, report) find the study without ``--study``.

    Raises:
        RunError: An empty or over-long name, or one other than the name the directory's manifest records.
    """
    if given is not None and not (0 < len(given.strip()) == len(given) <= 512):
        raise RunError(f"--study {given!r} is not a study name", where="--study",
                       fix="give 1 to 512 characters without leading or trailing spaces")
    recorded = None
    if manifest_path.is_file():
        recorded = json.loads(manifest_path.read_text(encoding="utf-8")).get("study")
    if given is not None and recorded is not None and given != recorded:
        raise RunError(f"{manifest_path.parent} belongs to the study {recorded!r}, not {given!r}", where="--study",
                       fix=f"give --study {recorded} (or none) to continue it, or a new --dir for another study")
    return given or recorded or default


def require_engine(command: str, storage: str | None = None) -> None:
    """Fail before anything is written when Optuna, or the PostgreSQL driver a ``storage`` URL needs, is missing.

    Args:
        command: The command asking, for the message (``"dmlplug tune run"``).
        storage: The ``--storage`` URL, if any.

    Raises:
        RunError: A missing package, with the extra that installs it.
    """
    import importlib.util

    needed = ["optuna", *(["psycopg"] if storage and storage.startswith("postgres") else [])]
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise RunError(f"{command} needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
                       "not installed", where=command, fix="pip install 'dmlplug[tune]'")


def open_storage(tune_dir: Path, url: str | None) -> Any:
    """The study's storage: the journal file in ``tune_dir``, or the database at ``url``.

    Raises:
        RunError: The database cannot be reached or is not a database URL Optuna knows.
    """
    import optuna
    from optuna.storages import RetryHeartbeatStaleTrialCallback
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    if url is None:
        tune_dir.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(tune_dir / JOURNAL)))
    for attempt in range(3):
        try:
            with warnings.catch_warnings(), _schema_lock(url):
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # the heartbeat, since 2.8
                return optuna.storages.RDBStorage(
                    url, heartbeat_interval=HEARTBEAT, grace_period=GRACE,
                    heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=1),
                    engine_kwargs={"pool_pre_ping": True, "connect_args": _connect_args(url)})
        except Exception as exc:  # sqlalchemy raises its own family for unreachable servers, bad URLs, drivers
            # Workers starting together on a new database (other than PostgreSQL, which the lock serialises) race
            # to create its tables; the loser sees an IntegrityError and finds the tables there when it tries again.
            if type(exc).__name__ == "IntegrityError" and attempt < 2:
                time.sleep(1.0 + attempt)
                continue
            raise RunError(f"cannot open the study storage {mask_secrets(url)}: {type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else ''}", where="--storage",
                           fix="check that the database server runs and the URL (user, password, host, port, "
                               "database) is right") from None
    raise AssertionError("unreachable")  # the last attempt returns or raises


def load_study(directory: Path, storage: str | None, *, manifest: str, command: str, study: str,
               format: str | None = None) -> tuple[dict[str, Any], Any]:
    """The manifest and Optuna study of a directory that ``dmlplug COMMAND run`` made (a search, a sweep).

    Args:
        directory: The ``--dir`` of that run.
        storage: The database URL the study lives in, or ``None`` for the directory's journal file.
        manifest: The manifest's file name (``tune.json``, ``sweep.json``).
        command: ``"tune"`` or ``"sweep"``, for messages.
        study: The study's name when the manifest names none (directories made before ``--study``).
        format: The manifest's ``format`` this command wrote, if it writes one.

    Raises:
        RunError: Not such a directory, or no study in its storage.
    """
    import optuna

    path = directory / manifest
    found = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    if found is None or (format is not None and found.get("format") != format):
        raise RunError(f"{directory} is not a `dmlplug {command}` directory (no {manifest}"
                       + (f" of format {format})" if format else ")"), where=str(directory),
                       fix=f"give the --dir of a `dmlplug {command} run`")
    name = found.get("study", study)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return found, optuna.load_study(study_name=name, storage=open_storage(directory, storage))
    except KeyError:
        raise RunError(f"no {command} study {name!r} in the storage of {directory}", where=storage or str(directory),
                       fix=f"run `dmlplug {command} run` first, or give its --storage") from None


@contextmanager
def _schema_lock(url: str) -> Iterator[None]:
    """On PostgreSQL, hold an advisory lock while Optuna creates or checks its tables (elsewhere, nothing).

    Workers started together on a new database otherwise race to create the tables: the losers fail with
    DuplicateTable or UniqueViolation, depending on where the race is lost. Under the lock, the first creates them
    and the others find them.
    """
    if not url.startswith("postgres"):
        yield
        return
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args=_connect_args(url))
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": SCHEMA_LOCK})
            try:
                yield
            finally:
                connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": SCHEMA_LOCK})
    finally:
        engine.dispose()


def _connect_args(url: str) -> dict[str, Any]:
    # A server that does not answer should be an error within seconds, not a hang.
    return {"connect_timeout": 10} if url.startswith("postgres") else {}


def open_study(tune_dir: Path, space: Any, identity: str, storage_url: str | None, name: str = STUDY) -> Any:
    """Create or load the study called ``name``; refuse one made for another space.

    The space's ``[tune] sampler`` is built with ``ctx.seed`` = ``[tune] sampler_seed`` and ``ctx.search_space``
    = the searched keys as Optuna distributions; its ``pruner`` with the same context.

    Raises:
        RunError: The storage is unreachable, or its study was created with another space or recipe.
    """
    import optuna

    from dmlplug import BuildContext
    from dmlplug_builtins.tune.space import distributions

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    settings = space.settings
    # seed None is fresh randomness (the register_tune_samplers contract; BuildContext types a run's seed as int)
    context = BuildContext(seed=settings.sampler_seed, search_space=distributions(space))
    storage = open_storage(tune_dir, storage_url)
    study = optuna.create_study(study_name=name, storage=storage, direction=settings.direction,
                                sampler=settings.sampler.build(context), pruner=settings.pruner.build(context),
                                load_if_exists=True)
    stored = study.user_attrs.get(SPACE_ATTR)
    if stored is None:
        study.set_user_attr(SPACE_ATTR, identity)
    elif stored != identity:
        raise RunError(f"the study {name!r} was created with another space, recipe or --set overrides",
                       where=storage_url and mask_secrets(storage_url) or str(tune_dir / JOURNAL),
                       fix="use a new --dir (with a database, also another --study) for a changed search, or run "
                           "the original one")
    return study


def take_mark(number: int) -> str:
    """``host:pid#number``: written on a trial by the process that takes it (:data:`TAKEN_ATTR`).

    A lost trial's retry arrives with its user attributes, the dead worker's mark among them; that mark names
    the lost trial's number, not the retry's, so the retry is never taken for lost before its new owner marks it.
    """
    return f"{worker_id()}#{number}"


def recover_lost_trials(study: Any) -> list[int]:
    """Fail the RUNNING trials of dead workers and retry each once; returns their numbers.

    On any storage, the dead processes of this machine: the journal file has no heartbeat, so a worker starting
    on the machine checks the process ids of the marks (:func:`take_mark`). On a database, also any machine's,
    through Optuna's heartbeat.
    """
    import optuna
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.storages import RetryHeartbeatStaleTrialCallback
    from optuna.trial import TrialState

    host, storage, lost = socket.gethostname(), study._storage, []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner, _, number = str(trial.user_attrs.get(TAKEN_ATTR, "")).rpartition("#")
        name, _, pid = owner.rpartition(":")
        if number != str(trial.number) or name != host or not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            # Two workers may find it together: the storage lets one fail it (the other gets
            # UpdateFinishedTrialError), and only that one queues the retry.
            storage.set_trial_user_attr(trial._trial_id, REASON_ATTR, f"worker {owner} died")
            storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        except UpdateFinishedTrialError:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "experimental" since Optuna 2.8
            RetryHeartbeatStaleTrialCallback(max_retry=1)(study, storage.get_trial(trial._trial_id))
        lost.append(int(trial.number))
    if getattr(storage, "get_heartbeat_interval", lambda: None)():
        before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # since Optuna 2.9
            optuna.storages.fail_stale_trials(study)  # any machine's, through the heartbeat
        trials = study.get_trials(deepcopy=False)
        retried = retried_numbers(trials)  # not a trial that failed on its own meanwhile: those are not retried
        lost += [t.number for t in trials if t.state == TrialState.FAIL and t.number not in before
                 and t.number in retried]
    return lost


def retried_numbers(trials: Sequence[Any]) -> set[int]:
    """Numbers of failed trials that were queued again (their retry stands for them)."""
    from optuna.storages import RetryHeartbeatStaleTrialCallback

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "experimental" since Optuna 2.8
        return {n for n in (RetryHeartbeatStaleTrialCallback.retried_trial_number(t) for t in trials)
                if n is not None}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def counted(study: Any) -> int:
    """Trials that count towards ``--trials``: complete, pruned, or failed, except failures that were retried.

    A lost worker's trial is failed and retried once (:func:`recover_lost_trials`, the heartbeat): its retry
    counts, the failure does not, so nothing is counted twice.
    """
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    retried = retried_numbers(trials)
    finished = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return sum(1 for t in trials if t.state in finished and t.number not in retried)
