"""The ``tensorboard`` logger: event files under stable tags (a public interface, docs/monitoring.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmlplug import hookimpl
from dmlplug.protocols import RunView
from dmlplug.secrets import mask_values
from dmlplug_builtins.loggers.tracker_rows import BOOKKEEPING, SELECTED_ON_KEY, selection_text

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter



class TensorBoardLogger:
    """Event files under stable tags (documented in docs/monitoring.md).

    Every event of a run is logged at the global optimizer step (an evaluation at the step after which it ran,
    0 for the untrained model), so all curves share one x-axis; the epoch is the scalar ``epoch``.
    Scalars: ``train/loss/<term>`` (every loss and regularizer term and ``total``), ``train/lr/<group>``
    (every optimizer parameter group), ``eval/<split>/<metric>``, ``epoch``. At every evaluation also the
    histograms ``eval/<split>/pair_distance/positive`` and ``.../negative``, the evaluator figures
    ``eval/<split>/figure/<name>``, the retrieval pictures ``eval/<split>/pictures/worst`` and ``.../sample``
    (``[evaluation] pictures``) and the text ``eval/<split>/counts`` (bookkeeping counts such as
    ``excluded_queries``); at the start the text ``run/selection`` (what selects ``best.pt``: TEST in capitals when
    the recipe selects on the test split), at the end of the run the embedding projector and the hyper-parameters
    (with ``dmlplug.selected_on``).

    Args:
        params: The logger's :class:`~dmlplug_builtins.loggers.TensorBoardParams`.
    """

    def __init__(self, params: Any):
        self.params = params
        self.writer: SummaryWriter | None = None  # opened by on_run_start
        self._epoch_logged: tuple[int, int] | None = None  # (step, epoch) of the last ``epoch`` scalar
        #: The split of the latest evaluation: the run's eval_context, latest_metrics and best_metrics are its.
        self._last_split = "test"

    def _open(self) -> SummaryWriter:
        """The event writer, which every hook after ``on_run_start`` writes to."""
        assert self.writer is not None, "on_run_start opens the writer"
        return self.writer

    @hookimpl
    def on_run_start(self, run: RunView) -> None:
        """Open the event writer."""
        from torch.utils.tensorboard import SummaryWriter

        from dmlplug_builtins.loggers import events

        # After a resume, drop events logged past the checkpoint (the run trains those steps again).
        log_dir = run.directory / self.params.subdir
        events.prepare(log_dir, run)
        self.writer = SummaryWriter(log_dir=str(log_dir))
        if not run.resumed:  # kept from the first start: a resume would log it twice
            self.writer.add_text("run/selection", selection_text(run.selected_on), 0)

    @hookimpl
    def on_epoch_start(self, run: RunView, epoch: int) -> None:
        """``train/lr/<group>`` of every optimizer group (at the epoch's first step, not again on a resume)."""
        if run.step > (epoch - 1) * run.steps_per_epoch:  # resumed mid-epoch: logged when the epoch started
            return
        for name, lr in run.learning_rates.items():
            self._open().add_scalar(f"train/lr/{name}", lr, run.step)

    @hookimpl
    def on_step_end(self, run: RunView, step: int, losses: Mapping[str, float]) -> None:
        """``train/loss/<term>`` every ``run.log_every`` steps."""
        if step % run.recipe.run.log_every == 0:
            for name, value in losses.items():
                self._open().add_scalar(f"train/loss/{name}", value, step)
            self._log_epoch(step, run.epoch)

    def _log_epoch(self, step: int, epoch: int) -> None:
        """The scalar ``epoch`` at ``step`` (as Lightning logs it), once per step."""
        assert self.writer is not None  # opened by on_run_start
        if self._epoch_logged != (step, epoch):
            self.writer.add_scalar("epoch", epoch, step)
            self._epoch_logged = (step, epoch)

    @hookimpl
    def on_eval_end(self, run: RunView, epoch: int, split: str, metrics: dict[str, float]) -> None:
        """Metrics, counts, pair-distance histograms and evaluator figures of the evaluation, at the global step."""
        self._last_split = split
        step = run.step
        counts = {}
        for name, value in metrics.items():
            if not isinstance(value, float | int):
                continue
            if name in BOOKKEEPING:
                counts[name] = value
            else:
                self._open().add_scalar(f"eval/{split}/{name}", value, step)
        self._log_epoch(step, epoch)
        if counts:
            rows = "".join(f"| {name} | {_count(value)} |\n" for name, value in sorted(counts.items()))
            self._open().add_text(f"eval/{split}/counts", f"epoch {epoch}, step {step}\n\n| count | value |\n"
                                                         f"|---|---|\n{rows}", step)
        eval_context = run.eval_context
        if eval_context is not None:
            if self.params.histograms:
                from dmlplug.evaluation.pairs import sample_pair_distances

                pos, neg = sample_pair_distances(eval_context, self.params.histogram_pairs,
                                                 seed=eval_context.seed + epoch)
                for kind, values in (("positive", pos), ("negative", neg)):
                    if len(values):
                        self._open().add_histogram(f"eval/{split}/pair_distance/{kind}", values, step)
            if self.params.figures:
                from dmlplug.evaluation.runner import collect_figures

                for name, figure in collect_figures(_evaluators(run), eval_context).items():
                    self._open().add_figure(f"eval/{split}/figure/{name}", figure, step, close=False)
                    figure.clear()
        for kind, path in run.latest_pictures.items():  # the retrieval pictures ([evaluation] pictures)
            self._open().add_image(f"eval/{split}/pictures/{kind}", _png_pixels(path), step, dataformats="HWC")
        self._open().flush()

    @hookimpl
    def on_checkpoint(self, run: RunView, path: Path) -> None:
        """Flush the events: a run killed later resumes from this checkpoint with none of them lost."""
        if self.writer is not None:
            self.writer.flush()

    @hookimpl
    def on_run_end(self, run: RunView, status: str, error: BaseException | None) -> None:
        """At the end of a completed run: the projector and the hyper-parameters; close the writer."""
        if self.writer is None:
            return
        try:
            if status == "completed":
                eval_context = run.eval_context
                if self.params.projector and eval_context is not None:
                    self._projector(run, eval_context)
                if self.params.hparams:
                    self._hparams(run)
        finally:
            self.writer.close()
            from dmlplug_builtins.loggers import events

            events.release(run.directory / self.params.subdir, run)

    def _projector(self, run, eval_context) -> None:
        import numpy as np
        import torch

        assert self.writer is not None  # on_run_end calls this only with an open writer
        split = self._last_split
        source = getattr(run.dataset, split)
        rng = np.random.default_rng(run.recipe.run.seed)
        n = len(eval_context.labels)
        chosen = np.sort(rng.choice(n, size=min(n, self.params.projector_samples), replace=False))
        embeddings = eval_context.numpy_embeddings()[chosen]
        labels = eval_context.labels[chosen]
        size = self.params.thumbnail_size
        thumbs = np.stack([np.asarray(source.load_image(int(i)).convert("RGB").resize((size, size)))
                           for i in chosen])
        label_img = torch.from_numpy(thumbs).permute(0, 3, 1, 2).float() / 255.0
        names = list(getattr(source, "class_names", []) or [])
        metadata = [[str(int(y)), _tsv_safe(names[int(y)]) if int(y) < len(names) else str(int(y))] for y in labels]
        self.writer.add_embedding(torch.from_numpy(np.ascontiguousarray(embeddings)), metadata=metadata,
                                  label_img=label_img, global_step=run.step, tag=f"{split}_embeddings",
                                  metadata_header=["label", "class"])

    def _hparams(self, run) -> None:
        assert self.writer is not None  # on_run_end calls this only with an open writer
        split = self._last_split
        latest = {k: float(v) for k, v in run.latest_metrics.items() if isinstance(v, float | int)}
        metrics = {f"hparams/final/{split}/{k}": v for k, v in latest.items() if k not in BOOKKEEPING}
        metrics.update({f"hparams/best/{split}/{k}": float(v) for k, v in run.best_metrics.items()
                        if isinstance(v, float | int) and k not in BOOKKEEPING})
        # Counts of the last evaluation are facts of the run, shown beside the recipe values.
        # selected_on labels the hparams/best/... values: "test" when the test split chose them.
        values = {**hparam_values(mask_values(run.flat_recipe)), SELECTED_ON_KEY: run.selected_on,
                  **{f"counts/{split}/{k}": v for k, v in latest.items() if k in BOOKKEEPING}}
        self.writer.add_hparams(values, metrics, run_name=".", global_step=run.step)


def _evaluators(run) -> list[Any]:
    """The run's evaluators in recipe order (``evaluators[0]``, ``evaluators[1]`` …)."""
    return [component for path, component in run.components.items() if path.startswith("evaluators[")]


def hparam_values(flat: Mapping[str, Any]) -> dict[str, Any]:
    """A flattened recipe with values TensorBoard's HParams accepts.

    Booleans, numbers and strings are kept; anything else (lists, ``None``) becomes its string form.
    """
    return {key: value if isinstance(value, bool | int | float | str) else str(value) for key, value in flat.items()}


def _png_pixels(path: Any) -> Any:
    """The RGB pixels of a PNG file as an ``H×W×3`` uint8 array."""
    import numpy as np
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def _count(value: float) -> str:
    """A count as an integer when it is one (``3``, not ``3.0``)."""
    return str(int(value)) if float(value).is_integer() else str(value)


def _tsv_safe(text: str) -> str:
    """Class names go into the projector's metadata.tsv: no tabs or line breaks."""
    return " ".join(str(text).split()) or "?"
