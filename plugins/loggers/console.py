"""The ``console`` logger: a progress bar per epoch on a terminal, one line per evaluation on stderr."""

from __future__ import annotations

import sys
import time
from typing import Any

from dmlplug import hookimpl


class ConsoleLogger:
    """Progress bar per epoch (on a terminal) and one line per evaluation.

    Args:
        params: The logger's :class:`~dmlplug_builtins.loggers.ConsoleParams`.
        quiet: No progress bar (``dmlplug run --quiet``).
    """

    def __init__(self, params: Any, quiet: bool):
        self.params = params
        self.quiet = quiet
        self._progress = None
        self._task = None
        self._last_losses: dict[str, float] = {}
        self._epoch_start = 0.0

    def _print(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    @hookimpl
    def on_run_start(self, run):
        """Announce the run; start the progress display on a terminal."""
        self._print(f"dmlplug: run {run.name!r} on {run.device} -> {run.directory}")
        if self.params.progress and not self.quiet and sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeRemainingColumn(), TextColumn("{task.fields[loss]}"), transient=True)
            self._progress.start()

    @hookimpl
    def on_epoch_start(self, run, epoch):
        """A fresh progress bar for the epoch."""
        self._epoch_start = time.time()
        if self._progress is not None:
            if self._task is not None:
                self._progress.remove_task(self._task)
            self._task = self._progress.add_task(f"epoch {epoch}/{run.recipe.run.epochs}",
                                                 total=run.steps_per_epoch, loss="")

    @hookimpl
    def on_step_end(self, run, step, losses):
        """Advance the bar; show the total loss every ``run.log_every`` steps."""
        self._last_losses = losses
        if self._progress is not None and self._task is not None:
            # Only on logging steps: reading a loss on other steps would wait for the device (a host sync).
            if step % run.recipe.run.log_every == 0:
                self._progress.update(self._task, advance=1, loss=f"loss {losses['total']:.4f}")
            else:
                self._progress.update(self._task, advance=1)

    @hookimpl
    def on_eval_end(self, run, epoch, split, metrics):
        """One line: epoch, split, last loss, epoch time, metrics."""
        shown = " ".join(f"{k}={v:.4f}" for k, v in metrics.items() if isinstance(v, float | int))
        timing = f" ({time.time() - self._epoch_start:.1f}s)" if epoch > 0 else ""
        loss = f" loss={self._last_losses['total']:.4f}" if epoch > 0 and self._last_losses else ""
        line = f"epoch {epoch} {split}{loss}{timing}: {shown}"
        if self._progress is not None:
            self._progress.console.print(line)
        else:
            self._print(line)

    @hookimpl
    def on_run_end(self, run, status, error):
        """Stop the progress display; say how the run ended and where its results are."""
        if self._progress is not None:
            self._progress.stop()
        self._print(f"dmlplug: run {status}; results in {run.directory}")
