"""Console and TensorBoard loggers (per-run plugins implementing the lifecycle hooks)."""

from __future__ import annotations

import importlib.util
import sys
import time
from typing import Any

from pydantic import Field, model_validator

from dmlplug import Params, hookimpl


class ConsoleParams(Params):
    """Parameters of the ``console`` logger."""

    progress: bool = Field(True, description="Show a progress bar when attached to a terminal.")


def require_package(module: str, logger: str, distribution: str) -> None:
    """Fail recipe validation when a logger's package is not importable (never fail silently at run time).

    Raises:
        ValueError: Turned by pydantic into a validation error of the logger's table.
    """
    if importlib.util.find_spec(module) is None:
        raise ValueError(
            f"logger {logger!r} needs the {distribution!r} package, which is not installed "
            f"(fix: pip install {distribution}, or remove this [[loggers]] table)")


class TensorBoardParams(Params):
    """Parameters of the ``tensorboard`` logger."""

    subdir: str = Field("tb", description="Folder of the event files inside the run directory.")
    histograms: bool = Field(True, description="Histograms of positive and negative pair distances at every "
                                               "evaluation (eval/<split>/pair_distance/positive|negative).")
    histogram_pairs: int = Field(20_000, ge=10, description="Positive and negative pairs sampled (seeded) for "
                                                            "each histogram; bounds time and memory.")
    figures: bool = Field(True, description="Evaluator figures (e.g. OPIS utility curves) as images at every "
                                            "evaluation (eval/<split>/figure/<name>).")
    projector: bool = Field(True, description="At the end of the run, a sample of the last evaluated embeddings "
                                              "with labels and thumbnails for TensorBoard's projector.")
    projector_samples: int = Field(500, ge=1, description="Embeddings in the projector sample.")
    thumbnail_size: int = Field(32, ge=8, le=128, description="Side of the projector thumbnails in pixels.")
    hparams: bool = Field(True, description="At the end of a completed run, the flattened recipe values with the "
                                            "final and best metrics (TensorBoard's HParams tab).")

    @model_validator(mode="after")
    def _tensorboard_installed(self) -> TensorBoardParams:
        require_package("tensorboard", "tensorboard", "tensorboard")
        return self


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
    """Event files under stable tags (documented in docs/monitoring.md).

    Scalars: ``train/loss/<term>`` (every loss and regularizer term and ``total``), ``train/lr/<group>``
    (every optimizer parameter group), ``eval/<split>/<metric>``. At every evaluation also the histograms
    ``eval/<split>/pair_distance/positive`` and ``.../negative`` and the evaluator figures
    ``eval/<split>/figure/<name>``; at the end of the run the embedding projector and the hyper-parameters.
    """

    def __init__(self, params: TensorBoardParams):
        self.params = params
        self.writer = None

    @hookimpl
    def on_run_start(self, run):
        from torch.utils.tensorboard import SummaryWriter

        # After a resume, drop events logged past the checkpoint (the run trains those steps again).
        purge = run.step + 1 if getattr(run, "resume_state", None) is not None else None
        self.writer = SummaryWriter(log_dir=str(run.directory / self.params.subdir), purge_step=purge)

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
        ctx = getattr(run, "last_eval_context", None)
        if ctx is not None:
            if self.params.histograms:
                pos, neg = sample_pair_distances(ctx, self.params.histogram_pairs, seed=ctx.seed + epoch)
                for kind, values in (("positive", pos), ("negative", neg)):
                    if len(values):
                        self.writer.add_histogram(f"eval/{split}/pair_distance/{kind}", values, epoch)
            if self.params.figures:
                from dmlplug.evaluation.runner import collect_figures

                for name, figure in collect_figures([ev for _, ev in run.components.evaluators], ctx).items():
                    self.writer.add_figure(f"eval/{split}/figure/{name}", figure, epoch, close=False)
                    figure.clear()
        self.writer.flush()

    @hookimpl
    def on_run_end(self, run, status, error):
        if self.writer is None:
            return
        try:
            if status == "completed":
                ctx = getattr(run, "last_eval_context", None)
                if self.params.projector and ctx is not None:
                    self._projector(run, ctx)
                if self.params.hparams:
                    self._hparams(run)
        finally:
            self.writer.close()

    def _projector(self, run, ctx) -> None:
        import numpy as np
        import torch

        split = run.recipe.recipe.evaluation.split
        source = getattr(run.components.dataset, split)
        rng = np.random.default_rng(run.recipe.recipe.run.seed)
        n = len(ctx.labels)
        chosen = np.sort(rng.choice(n, size=min(n, self.params.projector_samples), replace=False))
        embeddings = ctx.numpy_embeddings()[chosen]
        labels = ctx.labels[chosen]
        size = self.params.thumbnail_size
        thumbs = np.stack([np.asarray(source.load_image(int(i)).convert("RGB").resize((size, size)))
                           for i in chosen])
        label_img = torch.from_numpy(thumbs).permute(0, 3, 1, 2).float() / 255.0
        names = list(getattr(source, "class_names", []) or [])
        metadata = [[str(int(y)), _tsv_safe(names[int(y)]) if int(y) < len(names) else str(int(y))] for y in labels]
        self.writer.add_embedding(torch.from_numpy(np.ascontiguousarray(embeddings)), metadata=metadata,
                                  label_img=label_img, global_step=run.epoch, tag=f"{split}_embeddings",
                                  metadata_header=["label", "class"])

    def _hparams(self, run) -> None:
        split = run.recipe.recipe.evaluation.split
        metrics = {f"hparams/final/{split}/{k}": float(v) for k, v in run.last_metrics.items()
                   if isinstance(v, float | int)}
        metrics.update({f"hparams/best/{split}/{k}": float(v) for k, v in run.best_metrics.items()
                        if isinstance(v, float | int)})
        self.writer.add_hparams(flatten_hparams(run.recipe.resolved()), metrics, run_name=".",
                                global_step=run.epoch)


def _tsv_safe(text: str) -> str:
    """Class names go into the projector's metadata.tsv: no tabs or line breaks."""
    return " ".join(str(text).split()) or "?"


def sample_pair_distances(ctx: Any, n: int, seed: int) -> tuple[Any, Any]:
    """Euclidean distances of up to ``n`` positive and ``n`` negative (query, gallery) pairs, drawn with ``seed``.

    Positive pairs: a random query that has another gallery item of its class, and a uniformly drawn such
    item (never the query itself). Negative pairs: a random query and a uniformly drawn gallery item of
    another class. Memory is O(n·D), whatever the size of the evaluated set.

    Args:
        ctx: The :class:`~dmlplug.evaluation.EvalContext` of the evaluation.
        n: Pairs of each kind.
        seed: Random seed.

    Returns:
        ``(positive, negative)`` float64 arrays (empty when no such pair exists).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    x = ctx.numpy_embeddings()
    q_index, g_index = ctx.query_index, ctx.gallery_index
    g_labels = ctx.labels[g_index]
    order = np.argsort(g_labels, kind="stable")
    sorted_labels = g_labels[order]
    classes, starts, counts = np.unique(sorted_labels, return_index=True, return_counts=True)

    def distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.empty(len(a))
        for lo in range(0, len(a), 8192):  # bounded temporaries
            d = x[a[lo:lo + 8192]].astype(np.float64) - x[b[lo:lo + 8192]].astype(np.float64)
            out[lo:lo + 8192] = np.sqrt((d * d).sum(1))
        return out

    # Positives: among the members of the query's class in the gallery, skip the query's own slot.
    kept = ctx.knn_queries
    pos = np.empty(0)
    if len(kept):
        rows = kept[rng.integers(0, len(kept), size=n)]
        q = q_index[rows]
        cls = np.searchsorted(classes, ctx.labels[q])
        self_pos = ctx.self_pos[rows]
        own = self_pos >= 0
        choices = counts[cls] - own
        offset = (rng.random(n) * choices).astype(np.int64)
        slot = starts[cls] + offset
        if own.any():
            # Rank of the query inside its class block; draws at or after it move one slot on.
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            own_rank = np.where(own, rank[np.maximum(self_pos, 0)], np.iinfo(np.int64).max)
            slot = slot + (slot >= own_rank)
        pos = distances(q, g_index[order[slot]])
    # Negatives: a gallery item outside the query's class, by drawing a rank among the non-members.
    neg = np.empty(0)
    q_cls = np.searchsorted(classes, ctx.labels[q_index])
    present = (q_cls < len(classes)) & (classes[np.minimum(q_cls, len(classes) - 1)] == ctx.labels[q_index])
    members = np.where(present, counts[np.minimum(q_cls, len(classes) - 1)], 0)
    eligible = np.flatnonzero(len(g_index) - members > 0)
    if len(eligible):
        rows = eligible[rng.integers(0, len(eligible), size=n)]
        q = q_index[rows]
        m = members[rows]
        start = np.where(m > 0, starts[np.minimum(q_cls[rows], len(classes) - 1)], 0)
        r = (rng.random(n) * (len(g_index) - m)).astype(np.int64)
        slot = np.where(r < start, r, r + m)
        neg = distances(q, g_index[order[slot]])
    return pos, neg


def flatten_hparams(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested recipe values as ``{"section.key": value}`` with TensorBoard-compatible values.

    Lists become their string form; ``None`` becomes ``"None"``; ints, floats, bools and strings are kept.
    """
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_hparams(value, name + "."))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, item in enumerate(value):
                flat.update(flatten_hparams(item, f"{name}[{i}]."))
        elif isinstance(value, bool | int | float | str):
            flat[name] = value
        else:
            flat[name] = str(value)
    return flat


def build_console(params: ConsoleParams, ctx):
    """Console logger."""
    return ConsoleLogger(params, quiet=bool(ctx.extras.get("quiet", False)))


def build_tensorboard(params: TensorBoardParams, ctx):
    """TensorBoard logger (event files in <run>/<subdir>); the package was checked at validation."""
    return TensorBoardLogger(params)


@hookimpl
def register_loggers(register):
    """Register the console and TensorBoard loggers."""
    register("console", build_console, params=ConsoleParams, description="Progress bar and metric lines.")
    register("tensorboard", build_tensorboard, params=TensorBoardParams,
             description="TensorBoard: losses, learning rates, metrics, pair-distance histograms, evaluator figures, "
                         "embedding projector, hyper-parameters (docs/monitoring.md).")
