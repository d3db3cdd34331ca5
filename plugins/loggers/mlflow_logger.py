"""The ``mlflow`` logger: the run as an MLflow run (parameters, metrics at the global step, pictures as artifacts).

Names follow the TensorBoard tags (docs/monitoring.md) so a run reads the same in both: the metrics
``train/loss/<term>``, ``train/lr/<group>``, ``epoch`` and ``eval/<split>/<metric>`` at the global optimizer step.
MLflow accepts only alphanumerics, ``_ - . / :`` and spaces in a metric or parameter name, so ``@`` is written
``_at_`` (``eval/test/recall_at_1``), an index ``[i]`` ``.i`` (parameter ``evaluators.0.k``) and any other character
it refuses ``_`` (:func:`metric_key`).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dmlplug import hookimpl
from dmlplug.files import write_json
from dmlplug.protocols import RunView
from dmlplug.secrets import copy_masked, mask_secrets, mask_values
from dmlplug_builtins.loggers.tracker_rows import SELECTED_ON_KEY, EpochOnce, eval_values, loss_values

log = logging.getLogger(__name__)

#: The file in the run directory that names the tracked run, so a resumed dmlplug run continues it.
STATE_FILE = "mlflow.json"
#: Tag holding the run directory (absolute path).
RUN_DIR_TAG = "dmlplug.run_dir"
#: Tag holding the resumes of the run: a JSON list of ``{"step", "timestamp"}`` (see :class:`MLflowLogger`).
RESUMED_TAG = "dmlplug.resumed"
#: MLflow's limits (mlflow.utils.validation): entries per log_batch call and characters of a parameter value.
_BATCH, _PARAM_CHARS = 100, 6000
_STATUS = {"completed": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}


def metric_key(name: str) -> str:
    """``name`` as MLflow accepts it: ``@`` becomes ``_at_``, ``[i]`` ``.i``, any other refused character ``_``."""
    return re.sub(r"[^/\w.\- :]", "_", re.sub(r"\[(\d+)\]", r".\1", name.replace("@", "_at_")))


def param_value(value: Any) -> str:
    """A recipe value as an MLflow parameter (text, cut to MLflow's 6000 characters)."""
    text = json.dumps(value) if isinstance(value, list | dict | bool) or value is None else str(value)
    return text if len(text) <= _PARAM_CHARS else text[: _PARAM_CHARS - 3] + "..."


class MLflowLogger:
    """One MLflow run per dmlplug run, continued when the dmlplug run is resumed.

    At the start: the flattened recipe (``RunView.flat_recipe``: ``loss.name``, ``optimizer.lr``, ``evaluators.0.k``
    …) as parameters
    and the tag ``dmlplug.run_dir``. Every ``run.log_every`` steps ``train/loss/<term>`` and ``epoch``; at the start
    of every epoch ``train/lr/<group>``; at every evaluation ``eval/<split>/<metric>`` (bookkeeping counts as
    ``eval/<split>/counts/<name>``), the evaluator figures as ``figures/<split>/<name>_step_<NNNNNN>.png`` and the
    retrieval pictures as ``pictures/<split>/epoch_<NNN>_<kind>.png`` (their paths in the run directory); at the
    end ``results.json`` and ``recipe.resolved.toml`` and the run's status (FINISHED, FAILED, KILLED).

    Secrets: parameters, tags, the uploaded files and ``mlflow.json`` have passwords masked (:mod:`dmlplug.secrets`);
    credentials belong in ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``, which nothing records.

    Resume: the run id is stored in ``<run>/mlflow.json``; a resumed dmlplug run logs into the same MLflow run
    (new recipe keys are added as parameters; a changed value, which MLflow cannot overwrite, as the tag
    ``dmlplug.changed.<key>``). MLflow cannot delete metric values, so the points a killed run logged after its
    last checkpoint stay and the resumed run logs those steps again: each resume is recorded in the tag
    ``dmlplug.resumed`` (``[{"step": S, "timestamp": T}]``) and a point at a step above ``S`` logged before ``T``
    is stale. MLflow's own latest value of a metric (largest step, then latest timestamp) is already right.

    Args:
        params: The logger's :class:`~dmlplug_builtins.loggers.MLflowParams`.
        quiet: ``dmlplug run --quiet``: keep MLflow's "View run … at: <url>" lines off standard output.
    """

    def __init__(self, params: Any, quiet: bool = False):
        self.params = params
        self.quiet = quiet
        self.client: Any = None  # an mlflow.MlflowClient, opened by on_run_start
        self.run_id: str | None = None
        self._epoch = EpochOnce()

    # ---------------------------------------------------------------------------------------------- lifecycle

    @hookimpl
    def on_run_start(self, run: RunView) -> None:
        """Open (or, on a resume, reopen) the MLflow run; log the parameters and the run-directory tag."""
        from mlflow import MlflowClient
        from mlflow.tracking import get_tracking_uri

        uri = self.params.tracking_uri or get_tracking_uri()
        try:
            self.client = MlflowClient(tracking_uri=uri)
            self._start(run, uri)
        except Exception as exc:  # unreachable server, refused request, a local store without sqlalchemy …
            from dmlplug.errors import RunError

            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise RunError(f"the mlflow logger cannot log to {uri!r}: {first_line}", where="[[loggers]] mlflow",
                           fix="check tracking_uri (or MLFLOW_TRACKING_URI) and that the server answers; a local "
                               "store (sqlite, ./mlruns) needs the full mlflow package") from exc

    def _start(self, run, uri: str) -> None:
        state_path = run.directory / STATE_FILE
        stored = _read_state(state_path) if run.resumed else None
        if stored is not None and self._reopen(stored, uri):
            self._log_resumed_params(run)
            resumes = json.loads(self.client.get_run(self.run_id).data.tags.get(RESUMED_TAG, "[]"))
            resumes.append({"step": run.step, "timestamp": int(time.time() * 1000)})
            self.client.set_tag(self.run_id, RESUMED_TAG, json.dumps(resumes))
            return
        experiment = self.params.experiment or run.name
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found is not None else self.client.create_experiment(experiment)
        tags = {RUN_DIR_TAG: str(Path(run.directory).resolve()), "dmlplug.run_name": run.name,
                SELECTED_ON_KEY: run.selected_on}  # "test" labels every best number as chosen by the test split
        created = self.client.create_run(experiment_id, run_name=self.params.run_name or Path(run.directory).name,
                                         tags=tags)
        self.run_id = created.info.run_id
        write_json(state_path, {"tracking_uri": mask_secrets(uri), "experiment_id": experiment_id,
                                "run_id": self.run_id})
        self._log_params({metric_key(key): param_value(value) for key, value in mask_values(run.flat_recipe).items()})

    def _reopen(self, stored: Mapping[str, Any], uri: str) -> bool:
        """Continue the stored MLflow run; ``False`` (a new run is started) when this server does not have it."""
        from mlflow.exceptions import MlflowException

        try:
            found = self.client.get_run(stored["run_id"])
        except MlflowException:
            found = None
        if found is None or found.info.lifecycle_stage != "active":
            log.warning("mlflow: run %s of %s is not on %s (or was deleted); starting a new MLflow run",
                        stored.get("run_id"), stored.get("tracking_uri"), mask_secrets(uri))
            return False
        self.run_id = found.info.run_id
        self.client.update_run(self.run_id, status="RUNNING")
        return True

    def _log_resumed_params(self, run) -> None:
        """New recipe keys as parameters; changed values as tags ``dmlplug.changed.<key>`` (parameters are fixed)."""
        from mlflow.entities import RunTag

        old = self.client.get_run(self.run_id).data.params
        new = {metric_key(key): param_value(value) for key, value in mask_values(run.flat_recipe).items()}
        self._log_params({k: v for k, v in new.items() if k not in old})
        changed = [RunTag(f"dmlplug.changed.{k}", v) for k, v in new.items() if k in old and old[k] != v]
        for i in range(0, len(changed), _BATCH):
            self.client.log_batch(self.run_id, tags=changed[i:i + _BATCH])

    def _log_params(self, values: Mapping[str, str]) -> None:
        from mlflow.entities import Param

        params = [Param(key, value) for key, value in values.items()]
        for i in range(0, len(params), _BATCH):
            self.client.log_batch(self.run_id, params=params[i:i + _BATCH])

    def _log_metrics(self, values: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(metric_key(name), float(value), now, step) for name, value in values.items()]
        for i in range(0, len(metrics), 1000):  # MLflow's MAX_METRICS_PER_BATCH
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    @hookimpl
    def on_epoch_start(self, run: RunView, epoch: int) -> None:
        """``train/lr/<group>`` at the epoch's first step (not again when resumed mid-epoch)."""
        if run.step > (epoch - 1) * run.steps_per_epoch:
            return
        self._log_metrics({f"train/lr/{name}": lr for name, lr in run.learning_rates.items()}, run.step)

    @hookimpl
    def on_step_end(self, run: RunView, step: int, losses: Mapping[str, float]) -> None:
        """``train/loss/<term>`` and ``epoch`` every ``run.log_every`` steps (one request)."""
        if step % run.recipe.run.log_every == 0:
            self._log_metrics({**loss_values(losses), **self._epoch(step, run.epoch)}, step)

    @hookimpl
    def on_eval_end(self, run: RunView, epoch: int, split: str, metrics: dict[str, float]) -> None:
        """Metrics and counts at the global step; evaluator figures and retrieval pictures as artifacts."""
        step = run.step
        values = {**self._epoch(step, epoch), **eval_values(split, metrics)}
        self._log_metrics(values, step)
        if self.params.figures and run.eval_context is not None:
            self._log_figures(run, split, step)
        if self.params.pictures:
            for path in run.latest_pictures.values():
                relative = Path(path).resolve().relative_to(Path(run.directory).resolve())
                self.client.log_artifact(self.run_id, str(path), artifact_path=relative.parent.as_posix())

    def _log_figures(self, run, split: str, step: int) -> None:
        from dmlplug.evaluation.runner import collect_figures

        evaluators = [c for path, c in run.components.items() if path.startswith("evaluators[")]
        figures = collect_figures(evaluators, run.eval_context)
        if not figures:
            return
        with tempfile.TemporaryDirectory() as folder:
            for name, figure in figures.items():
                target = Path(folder) / f"{name}_step_{step:06d}.png"
                figure.savefig(target)
                figure.clear()
            self.client.log_artifacts(self.run_id, folder, artifact_path=f"figures/{split}")

    @hookimpl
    def on_run_end(self, run: RunView, status: str, error: BaseException | None) -> None:
        """The run's result files as artifacts, then its status: FINISHED, FAILED or KILLED (interrupted)."""
        if self.client is None or self.run_id is None:
            return
        try:
            if status == "completed":
                with tempfile.TemporaryDirectory() as folder:  # masked copies: no password leaves the machine
                    for name in ("results.json", "recipe.resolved.toml"):
                        if (run.directory / name).exists():
                            copy = copy_masked(run.directory / name, Path(folder) / name)
                            self.client.log_artifact(self.run_id, str(copy))
        finally:
            with contextlib.redirect_stdout(io.StringIO()) if self.quiet else contextlib.nullcontext():
                self.client.set_terminated(self.run_id, status=_STATUS.get(status, "FAILED"))


def _read_state(path: Path) -> dict[str, Any] | None:
    """The stored ``mlflow.json`` of a run directory, or ``None`` when absent or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "run_id" in data else None
