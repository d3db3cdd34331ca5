"""The ``console`` logger: a progress bar per epoch on a terminal, one line per evaluation on stderr.

A quiet run (``dmlplug run --quiet``, ``dmlplug.run(..., quiet=True)``) prints nothing: no bar, no lines.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from dmlplug import hookimpl
from dmlplug.protocols import RunView
from dmlplug_builtins.loggers.tracker_rows import selection_text


class ConsoleLogger:
    """Progress bar per epoch (on a terminal), one line per evaluation, and the selected checkpoint at the end.

    Args:
        params: The logger's :class:`~dmlplug_builtins.loggers.ConsoleParams`.
        quiet: Print nothing (``dmlplug run --quiet``, ``dmlplug.run(..., quiet=True)``).
    """

    def __init__(self, params: Any, quiet: bool):
        self.params = params
        self.quiet = quiet
        self._progress: Any = None  # a rich Progress while a terminal shows the bar
        self._task: Any = None
        self._last_losses: Mapping[str, float] = {}
        self._epoch_start = 0.0

    def _print(self, text: str) -> None:
        if self.quiet:  # the one place output leaves this logger: a quiet run prints nothing
            return
        if self._progress is not None:
            self._progress.console.print(text)
        else:
            print(text, file=sys.stderr, flush=True)

    @hookimpl
    def on_run_start(self, run: RunView) -> None:
        """Announce the run; start the progress display on a terminal."""
        self._print(f"dmlplug: run {run.name!r} on {run.device} -> {run.directory}")
        self._print(f"dmlplug: {selection_text(run.selected_on)}")
        if self.params.progress and not self.quiet and sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeRemainingColumn(), TextColumn("{task.fields[loss]}"), transient=True)
            self._progress.start()

    @hookimpl
    def on_epoch_start(self, run: RunView, epoch: int) -> None:
        """A fresh progress bar for the epoch."""
        self._epoch_start = time.time()
        if self._progress is not None:
            if self._task is not None:
                self._progress.remove_task(self._task)
            self._task = self._progress.add_task(f"epoch {epoch}/{run.recipe.run.epochs}",
                                                 total=run.steps_per_epoch, loss="")

    @hookimpl
    def on_step_end(self, run: RunView, step: int, losses: Mapping[str, float]) -> None:
        """Advance the bar; show the total loss every ``run.log_every`` steps."""
        self._last_losses = losses
        if self._progress is not None and self._task is not None:
            # Only on logging steps: reading a loss on other steps would wait for the device (a host sync).
            if step % run.recipe.run.log_every == 0:
                self._progress.update(self._task, advance=1, loss=f"loss {losses['total']:.4f}")
            else:
                self._progress.update(self._task, advance=1)

    @hookimpl
    def on_eval_end(self, run: RunView, epoch: int, split: str, metrics: dict[str, float]) -> None:
        """One line: epoch, split (marked when the test split selects best.pt), last loss, epoch time, metrics."""
        shown = " ".join(f"{k}={v:.4f}" for k, v in metrics.items() if isinstance(v, float | int))
        timing = f" ({time.time() - self._epoch_start:.1f}s)" if epoch > 0 else ""
        loss = f" loss={self._last_losses['total']:.4f}" if epoch > 0 and self._last_losses else ""
        selects = " (selects best.pt)" if split == "test" and run.selected_on == "test" else ""
        self._print(f"epoch {epoch} {split}{selects}{loss}{timing}: {shown}")

    @hookimpl
    def on_run_end(self, run: RunView, status: str, error: BaseException | None) -> None:
        """Stop the progress display; say which checkpoint was selected, how the run ended and where it is."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if status == "completed":
            self._print(selected_line(run.directory))
        self._print(f"dmlplug: run {status}; results in {run.directory}")


def selected_line(directory: Any) -> str:
    """``best.pt``: its epoch, what selected it (TEST in capitals) and its report split metrics (results.json)."""
    from dmlplug.errors import DmlplugError
    from dmlplug.evaluation.best import read_best

    try:
        best = read_best(directory)
    except DmlplugError as exc:
        return f"dmlplug: no selected checkpoint to show: {exc.what}"
    if best.epoch is None:
        return "dmlplug: no checkpoint selected (no evaluation of a trained model)"
    shown = " ".join(f"{k}={v:.4f}" for k, v in best.metrics.items())
    return f"dmlplug: best.pt = epoch {best.epoch}, {best.selection_label()}; {best.reported_on}: {shown}"
