"""Console and TensorBoard loggers (per-run plugins implementing the lifecycle hooks)."""

from __future__ import annotations

import sys
import time

from pydantic import Field

from dmlplug import Params, hookimpl


class ConsoleParams(Params):
    """Parameters of the ``console`` logger."""

    progress: bool = Field(True, description="Show a progress bar when attached to a terminal.")


class TensorBoardParams(Params):
    """Parameters of the ``tensorboard`` logger."""

    subdir: str = Field("tb", description="Folder of the event files inside the run directory.")


class ConsoleLogger:
    """Progress bar per epoch (on a terminal) and one line per evaluation."""

    def __init__(self, params: ConsoleParams, quiet: bool):
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
        self._print(f"dmlplug: run {run.recipe.recipe.run.name!r} on {run.device} -> {run.directory}")
        if self.params.progress and not self.quiet and sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeRemainingColumn(), TextColumn("{task.fields[loss]}"), transient=True)
            self._progress.start()

    @hookimpl
    def on_epoch_start(self, run, epoch):
        self._epoch_start = time.time()
        if self._progress is not None:
            if self._task is not None:
                self._progress.remove_task(self._task)
            self._task = self._progress.add_task(f"epoch {epoch}/{run.recipe.recipe.run.epochs}",
                                                 total=run.ctx.steps_per_epoch, loss="")

    @hookimpl
    def on_step_end(self, run, step, losses):
        self._last_losses = losses
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=1, loss=f"loss {losses['total']:.4f}")

    @hookimpl
    def on_eval_end(self, run, epoch, split, metrics):
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
        if self._progress is not None:
            self._progress.stop()
        self._print(f"dmlplug: run {status}; results in {run.directory}")


class TensorBoardLogger:
    """Scalars under stable tags: ``train/loss/<term>``, ``train/lr/<group>``, ``eval/<split>/<metric>``."""

    def __init__(self, params: TensorBoardParams):
        self.params = params
        self.writer = None

    @hookimpl
    def on_run_start(self, run):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run.directory / self.params.subdir))

    @hookimpl
    def on_epoch_start(self, run, epoch):
        for group in run.optimizer.param_groups:
            self.writer.add_scalar(f"train/lr/{group['name']}", group["lr"], run.step)

    @hookimpl
    def on_step_end(self, run, step, losses):
        if step % run.recipe.recipe.run.log_every == 0:
            for name, value in losses.items():
                self.writer.add_scalar(f"train/loss/{name}", value, step)

    @hookimpl
    def on_eval_end(self, run, epoch, split, metrics):
        for name, value in metrics.items():
            if isinstance(value, float | int):
                self.writer.add_scalar(f"eval/{split}/{name}", value, epoch)
        self.writer.flush()

    @hookimpl
    def on_run_end(self, run, status, error):
        if self.writer is not None:
            self.writer.close()


def build_console(params: ConsoleParams, ctx):
    """Console logger."""
    return ConsoleLogger(params, quiet=bool(ctx.extras.get("quiet", False)))


def build_tensorboard(params: TensorBoardParams, ctx):
    """TensorBoard logger (event files in <run>/tb)."""
    try:
        import tensorboard  # noqa: F401
    except ImportError as exc:
        from dmlplug.errors import ComponentError

        raise ComponentError("logger 'tensorboard' needs the tensorboard package", where="[[loggers]]",
                             fix="pip install tensorboard, or remove the logger") from exc
    return TensorBoardLogger(params)


@hookimpl
def register_loggers(register):
    """Register the console and TensorBoard loggers."""
    register("console", build_console, params=ConsoleParams, description="Progress bar and metric lines.")
    register("tensorboard", build_tensorboard, params=TensorBoardParams,
             description="TensorBoard event files: train/loss/*, train/lr/*, eval/<split>/*.")
