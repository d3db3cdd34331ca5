"""The ``wandb`` logger: the run as a Weights & Biases run (config, metrics on the global step, pictures as media).

Names are the TensorBoard tags (docs/monitoring.md), unchanged: ``train/loss/<term>``, ``train/lr/<group>``,
``epoch``, ``eval/<split>/<metric>`` (``eval/test/recall@1``), images ``eval/<split>/figure/<name>`` and
``eval/<split>/pictures/<kind>``. Every row carries ``global_step``, the x-axis of every other key
(``define_metric("*", step_metric="global_step")``, as W&B's own TensorBoard integration does), so the curves share
TensorBoard's steps while W&B's ``_step`` just counts rows: a resumed run can log a step again, which W&B's ``_step``
(it only moves forward) could not.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dmlplug import hookimpl
from dmlplug.files import write_json
from dmlplug.protocols import RunView
from dmlplug.secrets import copy_masked, mask_values, masked_argv
from dmlplug_builtins.loggers.tracker_rows import SELECTED_ON_KEY, EpochOnce, eval_values, loss_values

log = logging.getLogger(__name__)

#: The file in the run directory that names the W&B run, so a resumed dmlplug run continues it.
STATE_FILE = "wandb.json"
#: The x-axis of every logged key: the global optimizer step, as TensorBoard's.
STEP_KEY = "global_step"
#: Config keys the logger adds to the flattened recipe.
RUN_DIR_KEY, RUN_NAME_KEY, RESUMED_KEY = "dmlplug.run_dir", "dmlplug.run_name", "dmlplug.resumed"
#: Summary key holding how the dmlplug run ended (``completed``, ``failed``, ``interrupted``).
STATUS_KEY = "dmlplug.status"
#: ``run.finish(exit_code=...)`` per dmlplug status: W&B marks a run with a non-zero code as failed.
_EXIT_CODE = {"completed": 0, "failed": 1, "interrupted": 255}


class WandbLogger:
    """One W&B run per dmlplug run, continued (same run id) when the dmlplug run is resumed.

    At the start: the flattened recipe (``RunView.flat_recipe``: ``loss.name``, ``optimizer.lr``,
    ``evaluators[0].k`` …) as the run's config, with ``dmlplug.run_dir`` (the run directory) and ``dmlplug.run_name``.
    Every ``run.log_every`` steps ``train/loss/<term>`` and ``epoch``; at the start of every epoch ``train/lr/<group>``;
    at every evaluation ``eval/<split>/<metric>`` (bookkeeping counts as ``eval/<split>/counts/<name>``), the evaluator
    figures as images ``eval/<split>/figure/<name>`` and the retrieval pictures as images
    ``eval/<split>/pictures/<kind>``; every row with ``global_step``. At the end of a completed run
    ``results.json`` and ``recipe.resolved.toml`` among the run's files, the summary ``dmlplug.status`` and the exit
    code (0 completed, 1 failed, 255 interrupted).

    Secrets: the config, names, notes, tags, the saved files and the command line W&B records in the run's
    metadata have passwords masked (:mod:`dmlplug.secrets`); ``WANDB_API_KEY`` and other environment variables are
    never recorded.

    Resume: the run id is stored in ``<run>/wandb.json``; a resumed dmlplug run opens the same W&B run
    (``resume="allow"``, or ``"must"``), in the stored project and entity, and updates the config to the resumed
    recipe. W&B cannot delete logged rows, so the rows a killed run logged after its last checkpoint stay and the
    resumed run logs those steps again: each resume is recorded in the config ``dmlplug.resumed``
    (``[{"step": S, "timestamp": T}]``, ``T`` in seconds like W&B's ``_timestamp``); a row with ``global_step > S``
    and ``_timestamp < T`` is stale. W&B's summary (the last value of every key) is the resumed run's.

    Args:
        params: The logger's :class:`~dmlplug_builtins.loggers.WandbParams`.
        quiet: ``dmlplug run --quiet``: keep W&B's own lines ("Tracking run …", the summary) off the terminal.
    """

    def __init__(self, params: Any, quiet: bool = False):
        self.params = params
        self.quiet = quiet
        self.wandb_run: Any = None  # a wandb Run, opened by on_run_start
        self._epoch = EpochOnce()

    # ---------------------------------------------------------------------------------------------- lifecycle

    @hookimpl
    def on_run_start(self, run: RunView) -> None:
        """Open (or, on a resume, reopen) the W&B run with the flattened recipe as its config."""
        import wandb

        state_path = Path(run.directory) / STATE_FILE
        stored = _read_state(state_path) if run.resumed else None
        project = (stored or {}).get("project") or self.params.project or os.environ.get("WANDB_PROJECT") or run.name
        entity = (stored or {}).get("entity") or self.params.entity
        folder = Path(self.params.dir or os.environ.get("WANDB_DIR") or run.directory)
        resumes = list((stored or {}).get("resumed", []))
        if stored is not None:
            resumes.append({"step": run.step, "timestamp": time.time()})
        config = {**mask_values(run.flat_recipe), RUN_DIR_KEY: str(Path(run.directory).resolve()),
                  RUN_NAME_KEY: run.name,
                  SELECTED_ON_KEY: run.selected_on,  # "test" labels every best number as chosen by the test split
                  **({RESUMED_KEY: resumes} if resumes else {})}
        # W&B records these and, in the run's metadata, the command line: passwords masked (dmlplug.secrets).
        names = mask_values({"name": self.params.run_name, "group": self.params.group, "tags": self.params.tags,
                             "notes": self.params.notes, "job_type": self.params.job_type})
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with _argv_masked():
                self.wandb_run = wandb.init(
                    project=project, entity=entity, dir=str(folder), mode=self.params.mode,
                    name=names["name"] or Path(run.directory).name, group=names["group"], tags=names["tags"],
                    notes=names["notes"], job_type=names["job_type"], config=config,
                    id=stored["id"] if stored else None, resume=self.params.resume if stored else None,
                    allow_val_change=True, reinit="create_new",
                    settings=wandb.Settings(silent=True) if self.quiet else None)  # else WANDB_SILENT decides
        except Exception as exc:  # not logged in (online), a refused project or entity, an unreachable server …
            from dmlplug.errors import RunError

            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise RunError(f"the wandb logger cannot start a W&B run in project {project!r}: {first_line}",
                           where="[[loggers]] wandb",
                           fix="run `wandb login` (or set WANDB_API_KEY), or log locally with mode = \"offline\" "
                               "(or WANDB_MODE=offline) and `wandb sync` later") from exc
        if stored is not None:  # W&B merges the config passed to init with the run's; make the recipe win
            self.wandb_run.config.update(config, allow_val_change=True)
        self.wandb_run.define_metric(STEP_KEY)
        self.wandb_run.define_metric("*", step_metric=STEP_KEY)
        if self.wandb_run.settings.mode != "disabled":
            write_json(state_path, {"id": self.wandb_run.id, "project": self.wandb_run.project,
                                    "entity": entity or self.wandb_run.entity or None,
                                    "mode": self.wandb_run.settings.mode,
                                    "dir": str(folder.resolve()), "resumed": resumes})

    def _log(self, values: Mapping[str, Any], step: int) -> None:
        self.wandb_run.log({STEP_KEY: step, **values})

    @hookimpl
    def on_epoch_start(self, run: RunView, epoch: int) -> None:
        """``train/lr/<group>`` at the epoch's first step (not again when resumed mid-epoch)."""
        if run.step > (epoch - 1) * run.steps_per_epoch:
            return
        self._log({f"train/lr/{name}": lr for name, lr in run.learning_rates.items()}, run.step)

    @hookimpl
    def on_step_end(self, run: RunView, step: int, losses: Mapping[str, float]) -> None:
        """``train/loss/<term>`` and ``epoch`` every ``run.log_every`` steps (one row)."""
        if step % run.recipe.run.log_every == 0:
            self._log({**loss_values(losses), **self._epoch(step, run.epoch)}, step)

    @hookimpl
    def on_eval_end(self, run: RunView, epoch: int, split: str, metrics: dict[str, float]) -> None:
        """Metrics, counts, evaluator figures and retrieval pictures of the evaluation: one row at the global step."""
        import wandb

        step = run.step
        values: dict[str, Any] = {**self._epoch(step, epoch), **eval_values(split, metrics)}
        figures = []
        if self.params.figures and run.eval_context is not None:
            from dmlplug.evaluation.runner import collect_figures

            evaluators = [c for path, c in run.components.items() if path.startswith("evaluators[")]
            for name, figure in collect_figures(evaluators, run.eval_context).items():
                values[f"eval/{split}/figure/{name}"] = wandb.Image(_png(figure))
                figures.append(figure)
        if self.params.pictures:
            for kind, path in run.latest_pictures.items():
                values[f"eval/{split}/pictures/{kind}"] = wandb.Image(str(path))
        self._log(values, step)
        for figure in figures:
            figure.clear()

    @hookimpl
    def on_run_end(self, run: RunView, status: str, error: BaseException | None) -> None:
        """The run's result files among the W&B run's files, the summary ``dmlplug.status``, then finish."""
        if self.wandb_run is None:
            return
        try:
            if status == "completed" and self.wandb_run.settings.mode != "disabled":
                for name in ("results.json", "recipe.resolved.toml"):
                    if (Path(run.directory) / name).exists():
                        # Saved as a copy in the W&B run's files/ folder: run.save() of the original would
                        # symlink it (with a warning), and the link breaks when the run directory moves; the
                        # copy has its passwords masked.
                        copy = copy_masked(Path(run.directory) / name, Path(self.wandb_run.dir) / name)
                        self.wandb_run.save(str(copy), base_path=self.wandb_run.dir, policy="now")
            self.wandb_run.summary[STATUS_KEY] = status
        finally:
            wandb_run, self.wandb_run = self.wandb_run, None
            try:
                with _argv_masked():  # W&B may read the command line again when it finishes the run
                    wandb_run.finish(exit_code=_EXIT_CODE.get(status, 1))
            except Exception:
                if status == "completed":
                    raise
                # The run is already failing or interrupted: its own error is the one to report.
                log.warning("wandb: could not finish W&B run %s", wandb_run.id, exc_info=True)


@contextlib.contextmanager
def _argv_masked() -> Iterator[None]:
    """``sys.argv`` with its secrets masked while W&B reads it (``--set loggers[1].tracking_uri=…`` may hold one)."""
    saved = sys.argv
    sys.argv = masked_argv()
    try:
        yield
    finally:
        sys.argv = saved


def _png(figure: Any) -> Any:
    """A matplotlib figure drawn to a PIL image.

    ``wandb.Image(figure)`` needs ``matplotlib.pyplot`` imported, which the evaluators, drawing on bare ``Figure``
    objects, never do.
    """
    from PIL import Image

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    buffer.seek(0)
    with Image.open(buffer) as image:
        return image.convert("RGB")


def _read_state(path: Path) -> dict[str, Any] | None:
    """The stored ``wandb.json`` of a run directory, or ``None`` when absent or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("id"), str) else None
