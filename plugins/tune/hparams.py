"""The study in TensorBoard's HParams dashboard: ``DIR/report/tensorboard`` (``dmlplug tune report``).

Written with TensorBoard's own hparams summaries (``tensorboard.plugins.hparams.summary_v2``: the experiment
config and one session per trial) into event files of ``torch.utils.tensorboard.SummaryWriter``:

- the folder itself holds the experiment: every parameter the study sampled with its domain, taken from the
  trials' Optuna distributions (an interval for a float or int parameter, the choices for a categorical one),
  and the metrics below;
- ``trial-NNNN/`` is the session of trial ``NNNN`` (its id): the sampled values as hparams (a conditional
  parameter that was not active is absent), and the scalars ``objective`` (complete trials), ``fold_I`` (each
  finished fold's score), ``state`` (:data:`STATE_CODES`) and ``running_mean`` (the values reported to the
  pruner, at their steps ``fold * epochs + epoch``).

The folder is written beside its final place and moved there whole, replacing the previous report's: a report
run twice does not show every session twice, and an interrupted one leaves the previous folder as it was.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

#: The scalar ``state`` of a session: Optuna's trial state as a number the dashboard can filter on.
STATE_CODES = {"COMPLETE": 0, "PRUNED": 1, "FAIL": 2, "RUNNING": 3, "WAITING": 4}
FOLDER = "tensorboard"


def domains(study: Any) -> dict[str, Any]:
    """``{parameter: summary_v2 domain}`` of every parameter any trial sampled (the first trial's distribution)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    from tensorboard.plugins.hparams import summary_v2 as hp

    found: dict[str, Any] = {}
    for trial in study.get_trials(deepcopy=False):
        for name, distribution in trial.distributions.items():
            if name in found:
                continue
            if isinstance(distribution, FloatDistribution):
                found[name] = hp.RealInterval(float(distribution.low), float(distribution.high))
            elif isinstance(distribution, IntDistribution):
                found[name] = hp.IntInterval(int(distribution.low), int(distribution.high))
            elif isinstance(distribution, CategoricalDistribution):
                found[name] = hp.Discrete(_discrete(list(distribution.choices)))
    return dict(sorted(found.items()))


def _discrete(values: list[Any]) -> list[Any]:
    """Choices of one type, as TensorBoard's Discrete domain needs: numbers as floats, a mixture as strings."""
    if all(isinstance(v, bool) for v in values) or all(isinstance(v, str) for v in values):
        return values
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return [float(v) for v in values]
    return [str(v) for v in values]


def _value(value: Any, domain: Any) -> Any:
    """A trial's value in its domain's type (an int choice of a float domain as a float, ...)."""
    from tensorboard.plugins.hparams import summary_v2 as hp

    if isinstance(domain, hp.Discrete):
        return _discrete([value, *domain.values])[0] if domain.dtype is not str else str(value)
    return value


def metric_tags(study: Any) -> list[str]:
    """The metrics of the experiment: objective, each fold's score, state and the running mean."""
    folds = sorted({k for t in study.get_trials(deepcopy=False) for k in t.user_attrs if k.startswith("fold_")},
                   key=lambda k: int(k.removeprefix("fold_")) if k.removeprefix("fold_").isdigit() else 0)
    return ["objective", *folds, "state", "running_mean"]


def write_hparams(study: Any, folder: Path) -> Path:
    """Write the study's HParams event files into ``folder`` (replaced whole); returns ``folder``."""
    from tensorboard.plugins.hparams import summary_v2 as hp
    from torch.utils.tensorboard import SummaryWriter

    space = domains(study)
    params = {name: hp.HParam(name, domain) for name, domain in space.items()}
    metrics = [hp.Metric(tag, display_name=tag) for tag in metric_tags(study)]
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        with SummaryWriter(log_dir=str(staging)) as writer:
            created = min((t.datetime_start.timestamp() for t in study.trials if t.datetime_start), default=None)
            writer.file_writer.add_summary(hp.hparams_config_pb(list(params.values()), metrics, created))
        for trial in study.get_trials(deepcopy=False):
            session = f"trial-{trial.number:04d}"
            values = {params[k]: _value(v, space[k]) for k, v in trial.params.items() if k in params}
            start = trial.datetime_start.timestamp() if trial.datetime_start else None
            with SummaryWriter(log_dir=str(staging / session)) as writer:
                writer.file_writer.add_summary(hp.hparams_pb(values, trial_id=session, start_time_secs=start))
                if trial.state.name == "COMPLETE" and trial.value is not None:  # a pruned trial's is its last report
                    writer.add_scalar("objective", trial.value, 0)
                for key, score in trial.user_attrs.items():
                    if key.startswith("fold_") and isinstance(score, (int, float)):
                        writer.add_scalar(key, float(score), 0)
                writer.add_scalar("state", STATE_CODES.get(trial.state.name, -1), 0)
                for step, value in sorted(trial.intermediate_values.items()):
                    writer.add_scalar("running_mean", value, step)
        _replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


def _replace(staging: Path, folder: Path) -> None:
    """Move ``staging`` to ``folder``; a previous ``folder`` is moved aside first and removed after."""
    old = None
    if folder.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{folder.name}-old-", dir=folder.parent))
        os.replace(folder, old / folder.name)
    os.replace(staging, folder)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
