"""One trial: ``k`` ordinary runs (fold ``i`` validates), pruned on the running mean of the folds.

Every fold run goes through :func:`dmlplug.run` with a per-run hook object (:class:`FoldReporter`) whose
``on_eval_end`` reports the validation metric to Optuna at step ``fold * epochs + epoch``, as the mean of the
finished folds' scores and this fold's latest one, so the pruner compares trials on the same scale at every
step; with ``prune_at = "fold"`` it asks the pruner only when a fold ends, so trials are compared on the mean of
whole folds rather than on a fold's early epochs. A pruned trial's current fold run ends with status ``pruned``
and the pruner's reason in its results.json (:func:`fold_pruned`: the hook raises
:class:`dmlplug.errors.RunStopped`, which is also Optuna's ``TrialPruned``).
"""

from __future__ import annotations

import copy
import functools
import math
import shutil
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmlplug import hookimpl
from dmlplug.errors import DmlplugError, RunError

RECIPE = "recipe.toml"
#: A failed trial's error, in its folder: the reason, the sampled values and the traceback.
ERROR_FILE = "error.txt"


def trial_folder(tune_dir: Path, number: int) -> Path:
    """``TUNE_DIR/trials/trial-NNNN``: the fold run directories and, when the trial failed, its error."""
    return tune_dir / "trials" / f"trial-{number:04d}"


def fold_recipe(raw: dict[str, Any], settings: Any) -> dict[str, Any]:
    """The recipe every fold run trains: its dataset wrapped in ``tune_fold``, selecting on the validation fold."""
    recipe = copy.deepcopy(raw)
    data = recipe.setdefault("data", {})
    if not isinstance(data.get("dataset"), dict):
        raise RunError("the recipe has no [data.dataset] table for the folds to wrap")
    data["dataset"] = {"name": "tune_fold", "folds": settings.folds, "fold": 0, "seed": settings.fold_seed,
                       "dataset": data["dataset"]}
    evaluation = recipe.setdefault("evaluation", {})
    evaluation.pop("split", None)
    evaluation.update({"select_on": "val", "report_on": "val", "metric": settings.metric,
                       "mode": "max" if settings.direction == "maximize" else "min"})
    return recipe


def wrapped_key(key: str) -> str:
    """A key of the plain recipe in terms of the fold recipe (``data.dataset.x`` -> ``data.dataset.dataset.x``)."""
    if key == "data.dataset" or key.startswith("data.dataset.") or key.startswith("data.dataset["):
        return "data.dataset.dataset" + key.removeprefix("data.dataset")
    return key


class FoldReporter:
    """Per-run hook: report the running fold mean to the trial and prune when the pruner says so."""

    def __init__(self, trial: Any, fold: int, epochs: int, metric: str, finished: Sequence[float],
                 prune_at: str = "epoch"):
        self.trial, self.fold, self.epochs, self.metric = trial, fold, max(epochs, 1), metric
        self.finished, self.prune_at = list(finished), prune_at

    @hookimpl
    def on_eval_end(self, run: Any, epoch: int, split: str, metrics: dict[str, float]) -> None:
        """Report after every trained epoch's validation evaluation."""
        if split != "val" or epoch < 1 or self.metric not in metrics:
            return
        value = float(metrics[self.metric])
        if not math.isfinite(value):
            return
        running = statistics.fmean([*self.finished, value])
        self.trial.report(running, self.fold * self.epochs + epoch)
        # every epoch is reported (the pruner's percentiles need every step), but with prune_at = "fold" only a
        # finished fold may end the trial
        if self.prune_at == "fold" and epoch < self.epochs:
            return
        if self.trial.should_prune():
            raise fold_pruned()(f"pruned at fold {self.fold}, epoch {epoch} (running mean {running:.4f})",
                                status="pruned")


@functools.cache
def fold_pruned() -> type:
    """The exception class a pruned fold run ends with, made on first use (importing this module needs no Optuna).

    It is dmlplug's ``RunStopped`` (the run directory says ``pruned``, with the reason) and Optuna's
    ``TrialPruned`` (Optuna marks the trial pruned).
    """
    import optuna

    from dmlplug.errors import RunStopped

    class FoldPruned(RunStopped, optuna.TrialPruned):
        """A fold run stopped because the pruner pruned its trial."""

    return FoldPruned


def run_trial(trial: Any, *, tune_dir: Path, settings: Any, values: dict[str, Any], overrides: Sequence[str],
              epochs: int, device: str | None, runner: Any = None) -> float:
    """Train the ``k`` folds of one trial; returns the mean validation metric.

    Raises:
        optuna.TrialPruned: The pruner stopped the trial.
        RunError: A fold failed (the reason is recorded on the trial first); the study goes on.
    """
    import dmlplug

    runner = runner or dmlplug.run
    trial_dir = trial_folder(tune_dir, trial.number)
    sampled = [f"{wrapped_key(k)}={toml_value(v)}" for k, v in values.items()]
    scores: list[float] = []
    for fold in range(settings.folds):
        out = trial_dir / f"fold-{fold}"
        if out.exists():
            shutil.rmtree(out)  # a trial number is never reused; only a crash of this very call leaves one
        reporter = FoldReporter(trial, fold, epochs, settings.metric, scores, settings.prune_at)
        result = runner(tune_dir / RECIPE, [*overrides, *sampled, f"data.dataset.fold={fold}"], out=out,
                        device=device, quiet=True, hooks=[reporter])
        value = result.selection_metrics.get(settings.metric)
        if value is None or not math.isfinite(float(value)):
            raise RunError(f"fold {fold} gave no finite {settings.metric} (got {value!r})", where=str(out))
        scores.append(float(value))
        trial.set_user_attr(f"fold_{fold}", float(value))
    return statistics.fmean(scores)


def objective(trial: Any, **kwargs: Any) -> float:
    """:func:`run_trial` with every failure recorded as the trial's ``fail_reason`` and re-raised to Optuna."""
    import optuna

    from dmlplug_builtins.tune.space import suggest
    from dmlplug_builtins.tune.study import REASON_ATTR, TAKEN_ATTR, WORKER_ATTR, take_mark, worker_id

    trial.set_user_attr(WORKER_ATTR, worker_id())
    trial.set_user_attr(TAKEN_ATTR, take_mark(trial.number))
    values = suggest(trial, kwargs.pop("space"))
    try:
        return run_trial(trial, values=values, **kwargs)
    except optuna.TrialPruned:
        raise
    except Exception as exc:  # out of memory, a value the engine refuses at build time: recorded, never fatal
        first = exc.what if isinstance(exc, DmlplugError) else (str(exc).splitlines() or [""])[0]
        reason = f"{type(exc).__name__}: {first}"
        trial.set_user_attr(REASON_ATTR, reason)
        write_error(trial_folder(kwargs["tune_dir"], trial.number), trial.number, values, reason, exc)
        raise


def write_error(folder: Path, number: int, values: dict[str, Any], reason: str, exc: BaseException) -> None:
    """Write a failed trial's :data:`ERROR_FILE`: the console shows its one line, the file has the traceback."""
    import traceback

    from dmlplug.files import write_text

    folder.mkdir(parents=True, exist_ok=True)
    sampled = "\n".join(f"  {key} = {toml_value(value)}" for key, value in values.items())
    write_text(folder / ERROR_FILE, f"trial {number} failed: {reason}\n\nsampled values:\n{sampled}\n\n"
               + "".join(traceback.format_exception(exc)))


def toml_value(value: Any) -> str:
    """A sampled value as a ``--set`` value (strings quoted so that "1e-3"-like names stay strings)."""
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)
