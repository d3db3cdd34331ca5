"""A training run: the state of one run and the order of its phases.

The work is done by one module per concern; :class:`Run` holds the state they share and calls them:

* :mod:`~dmlplug.engine.build`: components from the recipe;
* :mod:`~dmlplug.engine.assembly`: optimizer, schedule, precision, EMA copy, the training loader;
* :mod:`~dmlplug.engine.train_step`: one optimizer step;
* :mod:`~dmlplug.engine.loop`: epochs, periodic evaluation, schedule, interruption;
* :mod:`~dmlplug.engine.evaluate`: embedding a split and running the evaluators;
* :mod:`~dmlplug.engine.selection`: the best evaluation so far;
* :mod:`~dmlplug.engine.state`: checkpoints;
* :mod:`~dmlplug.engine.view`: what lifecycle hooks see (:class:`~dmlplug.engine.view.ReadOnlyRun`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmlplug.engine import distributed, loop, rundir, state
from dmlplug.engine.assembly import Training, assemble
from dmlplug.engine.build import Components, build_components, new_context
from dmlplug.engine.evaluate import evaluate_split, write_artifacts
from dmlplug.engine.losslog import LossLog
from dmlplug.engine.seeding import seed_everything
from dmlplug.engine.selection import BestTracker, SplitRoles, resolve_splits
from dmlplug.engine.train_step import TrainStep
from dmlplug.engine.view import ReadOnlyRun
from dmlplug.errors import RunStopped
from dmlplug.evaluation.best import LAST
from dmlplug.files import write_json


@dataclass
class RunResult:
    """The outcome of :func:`dmlplug.engine.launch.run_recipe`, as also written to ``results.json``.

    ``initial_metrics``, ``metrics`` and ``best_metrics`` are on the report split (:attr:`reported_on`): before
    training, the final model, and the checkpoint selected on :attr:`selected_on` (``best.pt``, epoch
    :attr:`best_epoch`; ``"last"``: the last evaluated model, chosen by no evaluation); ``selection_metrics`` are
    that checkpoint's metrics on the split its evaluation ran on.
    """

    directory: Path
    status: str
    initial_metrics: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    best_metrics: dict[str, float] = field(default_factory=dict)
    best_epoch: int | None = None
    selection_metrics: dict[str, float] = field(default_factory=dict)
    selected_on: str | None = None
    reported_on: str | None = None


class Run:
    """State of one training run (the engine's; hooks get :attr:`view`).

    Args:
        recipe: The validated recipe.
        directory: The run directory.
        host: The plugin host (registry, hooks).
        device: ``"cpu"`` or ``"cuda"``.
        quiet: Whether console output is reduced to log lines.

    Attributes:
        components: Everything built from the recipe (after :meth:`build`).
        ctx: The :class:`~dmlplug.context.BuildContext` the components were built with.
        training: Optimizer, schedule, scaler, loader (:class:`~dmlplug.engine.assembly.Training`).
        train_step: Trains one batch (:class:`~dmlplug.engine.train_step.TrainStep`).
        epoch: Current epoch (0 before training).
        step: Global optimizer step.
        epoch_step: Batches of the current epoch already trained.
        epoch_complete: False from the first batch of an epoch until its end-of-epoch checkpoint.
        splits: Which split selects and which reports (:class:`~dmlplug.engine.selection.SplitRoles`), set
            by :meth:`build` once the dataset shows whether it has a validation split.
        best: The best evaluation so far (:class:`~dmlplug.engine.selection.BestTracker`).
        resumed: Whether :meth:`restore` continued the run from a checkpoint.
        loss_log: The loss terms of the steps not yet read back from the device
            (:class:`~dmlplug.engine.losslog.LossLog`).
        stop_signal: The SIGTERM/SIGINT that asked the run to stop, set by the signal handler.
    """

    def __init__(self, recipe: Any, directory: Path, host: Any, device: str, quiet: bool):
        self.recipe = recipe
        self.directory = directory
        self.host = host
        self.device = device
        self.quiet = quiet
        self.dist = distributed.current()
        self.components: Components | None = None
        self.ctx: Any = None
        self.training: Training | None = None
        self.train_step: TrainStep | None = None
        self.epoch = self.step = self.epoch_step = 0
        self.epoch_complete = True
        self.epoch_generator_state: Any = None  # the loader's generator at the start of the current epoch
        evaluation = recipe.recipe.evaluation
        self.splits: SplitRoles | None = None
        self.best = BestTracker(evaluation.metric, evaluation.mode, select_initial=evaluation.select_initial)
        self.initial_metrics: dict[str, float] = {}
        self.last_metrics: dict[str, float] = {}
        self.knn_backend: str | None = None
        self.eval_context: Any = None
        #: The latest evaluation's retrieval grids by kind ("worst", "sample"), see engine/pictures.py.
        self.latest_pictures: dict[str, Path] = {}
        self.resumed = False
        self.stop_signal: int | None = None
        self.gatherer = distributed.OutputGatherer()
        self.loss_log = LossLog(directory)
        self._prepared = False
        self.view = ReadOnlyRun(self)

    @property
    def model(self) -> Any:
        """The :class:`~dmlplug.engine.model.EmbeddingModel` being trained."""
        return self._components().model

    @property
    def optimizer(self) -> Any:
        """The optimizer; every parameter group carries its ``name``."""
        return self._training().optimizer

    def _components(self) -> Components:
        """:attr:`components`, set by :meth:`build` (AttributeError before, as ``None.model`` would raise)."""
        if self.components is None:
            raise AttributeError("the run has no components before build()")
        return self.components

    def _training(self) -> Training:
        """:attr:`training`, set by :meth:`build` (AttributeError before, as ``None.optimizer`` would raise)."""
        if self.training is None:
            raise AttributeError("the run has no training machinery before build()")
        return self.training

    @property
    def checkpoint_dir(self) -> Path:
        """``<run>/checkpoints``."""
        return self.directory / rundir.CHECKPOINTS

    # ------------------------------------------------------------------------------------------ phases
    def build(self) -> None:
        """Build every component and the training machinery (nothing is written, so a failure leaves no trace)."""
        r = self.recipe.recipe
        seed_everything(r.run.seed)
        self.ctx = new_context(self.recipe, device=self.device, host=self.host, run_dir=self.directory,
                               quiet=self.quiet)
        self.components = build_components(self.recipe, self.ctx)
        self.splits = resolve_splits(r.evaluation, has_val=self.components.dataset.val is not None,
                                     dataset=str(r.data.dataset.get("name")))
        self.best.latest = self.splits.select == LAST  # best.pt follows the latest evaluation: the last epoch's
        self.training = assemble(self.components, r, device=self.device, rank=self.dist.rank,
                                 world_size=self.dist.world_size)
        self.train_step = TrainStep(self.components, self.training, device=self.device, grad_clip=r.run.grad_clip,
                                    channels_last=bool(r.run.channels_last), directory=self.directory,
                                    dist=self.dist, gatherer=self.gatherer)

    def prepare_training(self) -> None:
        """Model settings between :meth:`build` and training.

        Applies ``[run]`` channels_last / compile; in a distributed run, converts BatchNorm to SyncBatchNorm
        on CUDA, synchronises the initial state from rank 0 and gathers model outputs during steps.
        """
        import torch

        c, r = self._components(), self.recipe.recipe
        self._prepared = True
        if r.run.channels_last:
            c.model.to(memory_format=torch.channels_last)
        if self.dist.enabled:
            if self.device.startswith("cuda"):
                c.model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(c.model)
            for module in (c.model, *c.trainable().values(), c.ema_model):
                distributed.broadcast_module(module)
            self.gatherer.attach(c.model)
            if c.ema_model is not None:
                self.gatherer.attach(c.ema_model)
        if r.run.compile:
            c.model.compile()

    def restore(self, checkpoint: dict[str, Any]) -> None:
        """Continue from a checkpoint (see :func:`dmlplug.engine.state.restore`)."""
        state.restore(self, checkpoint)

    def execute(self) -> RunResult:
        """Initial evaluation, training epochs with periodic evaluation, final results (:func:`loop.execute`)."""
        if not self._prepared:  # a Run driven by hand: build() then execute()
            self.prepare_training()
        return loop.execute(self)

    def train_epoch(self, skip: int = 0) -> None:
        """Train the current epoch (:func:`dmlplug.engine.loop.train_epoch`)."""
        if not self._prepared:
            self.prepare_training()
        loop.train_epoch(self, skip)

    # ------------------------------------------------------------------------------------------ services
    def evaluate(self, split: str = "test") -> dict[str, float]:
        """Embed ``split`` and run every evaluator; returns the metrics (the context is kept for hooks)."""
        metrics, eval_context = evaluate_split(self._components(), self.recipe.recipe, split, device=self.device,
                                               autocast=self._training().autocast, rerank=self.recipe.rerank)
        self.knn_backend = getattr(eval_context, "backend_used", None) or self.knn_backend
        self.eval_context = eval_context
        return metrics

    def save(self, name: str) -> Path:
        """Write ``checkpoints/<name>.pt`` (see :func:`dmlplug.engine.state.save`)."""
        return state.save(self, name)

    def write_artifacts(self) -> list[Path]:
        """The evaluators' files of the last evaluation, in the run directory."""
        if self.eval_context is None:  # no evaluation yet (write_artifacts would return [] too)
            return []
        return write_artifacts(self._components(), self.eval_context, self.directory)

    def result(self, status: str, error: BaseException | None = None) -> RunResult:
        """Write ``results.json`` (rank 0) and return the result (fields: docs/run-directory.md)."""
        best, evaluation = self.best, self.recipe.recipe.evaluation
        # before the dataset is built (a failed build) the selection split is what the recipe says (maybe auto)
        splits = self.splits or SplitRoles(evaluation.select_on, evaluation.report_on)
        reported = best.reported or {}
        result = RunResult(self.directory, status, self.initial_metrics, best.latest_report, reported, best.epoch,
                           best.metrics, splits.select, splits.report)
        payload = {
            "status": status,
            "name": self.recipe.recipe.run.name,
            # an epoch interrupted mid-way is not completed (resume continues it)
            "epochs_completed": self.epoch if self.epoch_complete else self.epoch - 1,
            "steps": self.step,
            "selected_on": splits.select,
            "reported_on": splits.report,
            "selection_metric": evaluation.metric,
            "selection_mode": evaluation.mode,
            "select_initial": evaluation.select_initial,
            "initial_metrics": self.initial_metrics,
            "metrics": best.latest_report,
            "metrics_epoch": best.latest_report_epoch,
            "best_metrics": reported,
            "best_epoch": best.epoch,
            "selection_metrics": best.metrics,
            "knn_backend": self.knn_backend,
        }
        if isinstance(error, RunStopped):  # stopped on purpose by a hook: why, not an error
            payload["reason"] = error.what
        elif error is not None:
            payload["error"] = str(error)
        if self.dist.is_main and self.directory.is_dir():
            write_json(self.directory / rundir.RESULTS, payload)
        return result
