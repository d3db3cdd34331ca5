"""The public grid engine of the tune plugin: a grid of runs on an Optuna study, each trained once by any worker.

``dmlplug sweep`` (configurations × seeds) and other plugins' commands, such as ``dmlplug oodml run --worker``
(splits × seeds), are grids: every cell is one ordinary run, known in advance. This module is their interface
(:data:`__all__`, docs/tune.md, "The grid engine"); a plugin that uses it imports nothing else of the tune
plugin, and checks that the tune plugin is loaded before it imports this module, so that its commands fail with
one clear error when the tune plugin is disabled (ooDML: :func:`dmlplug_builtins.oodml.sweep.require_tune`).

A user: :func:`require_engine` (Optuna, and the driver a ``--storage`` URL needs, are installed), then
:func:`resolve_study_name` (the study's name a directory records), :func:`open_grid_study`, the grid as
:class:`Cell` objects, :func:`work` (with a ``run_cell`` that trains one cell and returns its metrics), and
:func:`tally` / :func:`outcomes` to read the study back.

The cells are queued in the study as waiting trials (``study.enqueue_trial``) with the cell's name in the user
attribute ``cell``; a worker takes a waiting trial with the storage's own atomic ``WAITING -> RUNNING`` change
(one worker wins each trial, on the journal file as on a database), trains its cell and tells the study the
outcome. No sampler is consulted: a worker that finds no waiting trial stops, so no trial outside the grid is
ever created.

Lost workers are handled as in ``dmlplug tune`` (the process ids of this machine's running cells, and Optuna's
heartbeat on a database, recorded here by a small thread): the lost cell is failed with its reason and queued again once
(``RetryHeartbeatStaleTrialCallback(max_retry=1)``); the retry counts, the failure does not.

Two commands starting together on an empty study may both queue a cell. A duplicate is found when it is taken
(another trial of the same cell with a lower number that is not a retried failure) and dropped untrained: it is
failed with the user attribute ``duplicate_of`` and counted nowhere.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmlplug.errors import RunError
from dmlplug.secrets import mask_secrets
from dmlplug_builtins.tune.study import (
    JOURNAL,
    REASON_ATTR,
    TAKEN_ATTR,
    WORKER_ATTR,
    open_storage,
    recover_lost_trials,
    require_engine,
    resolve_study_name,
    retried_numbers,
    take_mark,
    worker_id,
)

__all__ = ["CELL_ATTR", "DUPLICATE_ATTR", "METRIC_PREFIX", "VALUES_ATTR", "Cell", "GridProgress", "open_grid_study",
           "open_storage", "outcomes", "queue_cells", "require_engine", "resolve_study_name", "retried_numbers",
           "tally", "work"]

#: User attributes of a cell's trial: its name, its values, the trial it duplicates; ``metric:NAME`` its metrics.
CELL_ATTR = "cell"
VALUES_ATTR = "values"
DUPLICATE_ATTR = "duplicate_of"
METRIC_PREFIX = "metric:"
IDENTITY_ATTR = "dmlplug_grid"


@dataclass(frozen=True)
class Cell:
    """One run of a grid: a unique name (also its run directory, relative) and its values."""

    name: str
    values: dict[str, Any] = field(default_factory=dict, hash=False)


@dataclass
class GridProgress:
    """What one command did: cells it trained, cells it found lost and queued again."""

    trained: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    recovered: list[int] = field(default_factory=list)


def open_grid_study(directory: Path, storage_url: str | None, study_name: str, identity: str) -> Any:
    """Create or load the grid's study; refuse one made for another grid owner (recipe, overrides).

    Raises:
        RunError: The storage is unreachable, or its study belongs to another sweep.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(directory, storage_url)
    study = optuna.create_study(study_name=study_name, storage=storage, load_if_exists=True)
    stored = study.user_attrs.get(IDENTITY_ATTR)
    if stored is None:
        study.set_user_attr(IDENTITY_ATTR, identity)
    elif stored != identity:
        raise RunError(f"the study {study_name!r} in this storage belongs to another sweep (another recipe, "
                       "--set overrides or split file)",
                       where=mask_secrets(storage_url) if storage_url else str(directory / JOURNAL),
                       fix="use a new directory (with a database, also another --study) for another sweep, or rerun "
                           "the original one")
    return study


def queue_cells(study: Any, cells: Sequence[Cell]) -> int:
    """Queue the cells that have no trial yet; returns how many were queued."""
    present = {t.user_attrs.get(CELL_ATTR) for t in study.get_trials(deepcopy=False)}
    missing = [c for c in cells if c.name not in present]
    for cell in missing:
        study.enqueue_trial({}, user_attrs={CELL_ATTR: cell.name, VALUES_ATTR: cell.values})
    return len(missing)


def outcomes(trials: Sequence[Any]) -> dict[str, Any]:
    """Each cell's one counted trial: complete, failed (not retried), running or waiting.

    Retried failures and dropped duplicates stand for nothing; of the rest, a cell has at most one trial (the
    duplicates are dropped when taken, and a still-waiting duplicate is not reported over its original).
    """
    retried = retried_numbers(trials)
    result: dict[str, Any] = {}
    for trial in sorted(trials, key=lambda t: t.number):
        name = trial.user_attrs.get(CELL_ATTR)
        if name is None or trial.number in retried or DUPLICATE_ATTR in trial.user_attrs:
            continue
        result.setdefault(name, trial)
    return result


def _duplicate_of(study: Any, trial: Any) -> int | None:
    """A lower-numbered trial that stands for the same cell (waiting, running or finished), if any."""
    trials = study.get_trials(deepcopy=False)
    retried = retried_numbers(trials)
    name = trial.user_attrs.get(CELL_ATTR)
    for other in trials:
        if (other.number < trial.number and other.user_attrs.get(CELL_ATTR) == name
                and other.number not in retried and DUPLICATE_ATTR not in other.user_attrs):
            return int(other.number)
    return None


def _take(study: Any) -> Any | None:
    """Take one waiting trial (the storage lets exactly one worker change it to RUNNING); None when none wait.

    The taker then marks it (:func:`~dmlplug_builtins.tune.study.take_mark`), so that its death is noticed.
    """
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    storage = study._storage
    for trial in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        try:
            if storage.set_trial_state_values(trial._trial_id, state=TrialState.RUNNING):
                storage.set_trial_user_attr(trial._trial_id, WORKER_ATTR, worker_id())
                storage.set_trial_user_attr(trial._trial_id, TAKEN_ATTR, take_mark(trial.number))
                return storage.get_trial(trial._trial_id)
        except UpdateFinishedTrialError:
            continue
    return None


@contextmanager
def _heartbeat(storage: Any, trial_id: int) -> Iterator[None]:
    """Record the trial's heartbeat on a database storage while it runs (the journal file has none)."""
    interval = getattr(storage, "get_heartbeat_interval", lambda: None)()
    if not interval:
        yield
        return
    storage.record_heartbeat(trial_id)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval):
            storage.record_heartbeat(trial_id)

    thread = threading.Thread(target=beat, name=f"dmlplug-heartbeat-{trial_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def work(study: Any, cells: Sequence[Cell], run_cell: Callable[[Cell], dict[str, float]], *,
         wait: bool = False, echo: Callable[[str], None] = print, poll: float = 2.0) -> GridProgress:
    """Queue the grid's missing cells, then train waiting cells until none is left.

    Args:
        study: The grid's study (:func:`open_grid_study`).
        cells: The whole grid; cells of the study outside it (queued by another command) are trained too.
        run_cell: Trains one cell and returns its metrics (stored on the trial as ``metric:NAME`` attributes);
            an exception fails the cell, with its reason, and the work goes on.
        wait: Also wait for other workers' running cells to end (recovering lost ones) before returning.
        echo: Where progress lines go.
        poll: Seconds between looks at other workers' cells while waiting.
    """
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    by_name = {c.name: c for c in cells}
    queue_cells(study, cells)
    progress = GridProgress()
    while True:
        for number in recover_lost_trials(study):
            progress.recovered.append(number)
            echo(f"trial {number}: its worker died; marked failed and queued again once")
        frozen = _take(study)
        if frozen is None:
            if not wait or not study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
                return progress
            time.sleep(poll)
            continue
        storage = study._storage
        name = str(frozen.user_attrs.get(CELL_ATTR))
        original = _duplicate_of(study, frozen)
        if original is not None:
            storage.set_trial_user_attr(frozen._trial_id, DUPLICATE_ATTR, original)
            storage.set_trial_state_values(frozen._trial_id, TrialState.FAIL)
            continue
        cell = by_name.get(name) or Cell(name, dict(frozen.user_attrs.get(VALUES_ATTR, {})))
        standing = outcomes(study.get_trials(deepcopy=False)).values()  # every cell of the study, all commands'
        done = sum(1 for t in standing if t.state.is_finished())
        echo(f"[{done + 1}/{len(standing)}] {name}: running (trial {frozen.number})")
        with _heartbeat(storage, frozen._trial_id):
            try:
                metrics = run_cell(cell)
            except Exception as exc:  # a failed run, out of memory, a value the engine refuses: recorded
                what = getattr(exc, "what", None) or (str(exc).splitlines()[0] if str(exc) else "")
                storage.set_trial_user_attr(frozen._trial_id, REASON_ATTR, f"{type(exc).__name__}: {what}")
                study.tell(frozen.number, state=TrialState.FAIL)
                progress.failed.append(name)
                echo(f"{name}: failed ({type(exc).__name__}: {what})")
                continue
        try:
            for metric, value in metrics.items():
                storage.set_trial_user_attr(frozen._trial_id, METRIC_PREFIX + metric, float(value))
            study.tell(frozen.number, 0.0)  # the study's objective is unused: a grid has nothing to optimise
        except UpdateFinishedTrialError:  # taken for lost (a heartbeat missed for the grace period): its retry
            echo(f"{name}: counted as lost while it ran; its retry stands for it")  # stands for it, not this run
            continue
        progress.trained.append(name)
        echo(f"{name}: finished")


def tally(study: Any, cells: Sequence[Cell]) -> dict[str, int]:
    """How many of ``cells`` are complete, failed, running and waiting (lost-and-retried counted once)."""
    from optuna.trial import TrialState

    found = outcomes(study.get_trials(deepcopy=False))
    counts = {"complete": 0, "failed": 0, "running": 0, "waiting": 0}
    names = {TrialState.COMPLETE: "complete", TrialState.FAIL: "failed", TrialState.RUNNING: "running",
             TrialState.WAITING: "waiting"}
    for cell in cells:
        if cell.name in found and found[cell.name].state in names:
            counts[names[found[cell.name].state]] += 1
    return counts
