"""A training run: build from a recipe, evaluate, train, checkpoint, record results."""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dmlplug.context import BuildContext
from dmlplug.engine import distributed, rundir
from dmlplug.engine import resume as _resume
from dmlplug.engine.atomic import write_json
from dmlplug.engine.build import Components, build_components
from dmlplug.engine.checkpoint import rng_state, save_checkpoint, set_rng_state
from dmlplug.engine.data import TransformedSource, split_views, train_loader
from dmlplug.engine.device import autocast_dtype, is_out_of_memory
from dmlplug.engine.model import ema_update, freeze_backbone, make_ema_copy
from dmlplug.engine.optim import build_optimizer, build_scheduler, collect_groups
from dmlplug.engine.seeding import SeededDataset, seed_everything
from dmlplug.engine.step import StepOutput
from dmlplug.errors import RunError
from dmlplug.plugins import PluginHost
from dmlplug.recipe import ValidatedRecipe


@dataclass
class RunResult:
    """The outcome of :func:`dmlplug.engine.launch.run_recipe`, as also written to ``results.json``."""

    directory: Path
    status: str
    initial_metrics: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    best_metrics: dict[str, float] = field(default_factory=dict)
    best_epoch: int | None = None


class Run:
    """State of one training run; handed to every lifecycle hook.

    Attributes:
        recipe: The validated recipe.
        directory: The run directory.
        device: ``"cpu"`` or ``"cuda"``.
        components: Everything built from the recipe.
        optimizer: The optimizer with its named parameter groups.
        epoch: Current epoch (0 before training).
        step: Global optimizer step.
        quiet: Whether console output is reduced to log lines.
    """

    def __init__(self, recipe: ValidatedRecipe, directory: Path, host: PluginHost, device: str, quiet: bool):
        self.recipe = recipe
        self.directory = directory
        self.host = host
        self.device = device
        self.quiet = quiet
        self.epoch = 0
        self.step = 0
        self.components: Components | None = None
        self.optimizer: Any = None
        self.scheduler: Any = None
        self.scaler: Any = None
        self.best_value: float | None = None
        self.best_epoch: int | None = None
        self.best_metrics: dict[str, float] = {}
        self.initial_metrics: dict[str, float] = {}
        self.last_metrics: dict[str, float] = {}
        self.knn_backend: str | None = None
        self.ctx: BuildContext | None = None
        # Resume, signals and distributed training (see prepare_training / restore).
        self.dist = distributed.current()
        self.epoch_step = 0  # batches of the current epoch already trained
        self.epoch_complete = True  # False from the first batch of an epoch until its checkpoint
        self.resume_state: dict[str, Any] | None = None
        self.stop_signal: int | None = None  # set by the SIGTERM/SIGINT handler
        self.gatherer = distributed.OutputGatherer()
        self.batch_plan: Any = None
        self.channels_last = False

    # ------------------------------------------------------------------------------------------
    @property
    def model(self) -> Any:
        """The :class:`~dmlplug.engine.model.EmbeddingModel` being trained."""
        return self.components.model

    @property
    def last_eval_context(self) -> Any:
        """The :class:`~dmlplug.evaluation.EvalContext` of the latest evaluation (``None`` before the first)."""
        return getattr(self, "_last_eval_ctx", None)

    @property
    def checkpoint_dir(self) -> Path:
        """``<run>/checkpoints``."""
        return self.directory / rundir.CHECKPOINTS

    def build(self) -> None:
        """Build every component (nothing is written yet, so a failure here leaves no trace)."""
        r = self.recipe.recipe
        seed_everything(r.run.seed)
        self.ctx = BuildContext(device=self.device, seed=r.run.seed, host=self.host, run_dir=self.directory,
                                extras={"quiet": self.quiet})
        self.components = c = build_components(self.recipe, self.ctx)
        c.model.to(self.device)
        for module in (c.loss, c.miner, *(reg.module for reg in c.regularizers)):
            if isinstance(module, torch.nn.Module):
                module.to(self.device)
        self.ema_momentum = None
        if "ema" in c.needs:
            self.ema_momentum = self._ema_momentum()
            c.ema_model = make_ema_copy(c.model)
        groups = collect_groups([
            ("backbone", c.model.backbone), ("head", c.model.head), ("loss", c.loss),
            *((reg.name, reg.module) for reg in c.regularizers),
        ])
        # Frozen parameters (an EMA copy a component holds, fixed weights) never enter the optimizer; the
        # warm-up freeze of the backbone happens later, in train_epoch, so it is not affected.
        for group in groups:
            group.params = [p for p in group.params if p.requires_grad]
        groups = [g for g in groups if g.params]
        self.optimizer = build_optimizer(groups, r.optimizer)
        self.scheduler = build_scheduler(self.optimizer, r.scheduler, r.run.epochs)
        self.autocast = autocast_dtype(r.run.precision, self.device)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.autocast == torch.float16)
        self.train_loader = train_loader(
            TransformedSource(c.dataset.train, c.train_transform), c.sampler,
            workers=r.data.workers, device=self.device, seed=r.run.seed,
        )

    def _component_modules(self) -> dict[str, Any]:
        """Built component by recipe path (``"loss"``, ``"regularizers[0]"`` …), for engine services."""
        c = self.components
        modules = {"backbone": c.model.backbone, "head": c.model.head, "loss": c.loss, "miner": c.miner}
        for i, reg in enumerate(c.regularizers):
            modules[f"regularizers[{i}]"] = reg.module
        return modules

    def _ema_momentum(self) -> float:
        """The EMA momentum asked for by the components that require ``"ema"`` (their ``ema_momentum``)."""
        modules = self._component_modules()
        momenta: dict[str, float] = {}
        for path in self.components.needs.by["ema"]:
            value = getattr(modules.get(path), "ema_momentum", None)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
                raise RunError(
                    f"the component at {path} requires an EMA model but its `ema_momentum` is {value!r}",
                    where=f"recipe section {path}",
                    fix="the component must define a float attribute ema_momentum in [0, 1] "
                        "(report this to the plugin's author)",
                )
            momenta[path] = float(value)
        if len(set(momenta.values())) > 1:
            raise RunError(
                f"components ask for different EMA momenta: {momenta}", where="recipe",
                fix="the engine keeps one EMA copy of the model: give the components the same momentum",
            )
        return next(iter(momenta.values()))

    # ------------------------------------------------------------------------------------------
    def evaluate(self, split: str = "test") -> dict[str, float]:
        """Embed ``split`` and run every evaluator; returns the metrics."""
        from dmlplug.evaluation import EvalContext, run_evaluators

        c, r = self.components, self.recipe.recipe
        source = getattr(c.dataset, split)
        embeddings, labels = distributed.embed_dataset(
            c.model, TransformedSource(source, c.test_transform), batch_size=r.data.eval_batch_size,
            workers=r.data.workers, device=self.device, autocast=self.autocast)
        masks = {}
        if split == "test" and c.dataset.test_query_mask is not None:
            masks = {"query_mask": c.dataset.test_query_mask, "gallery_mask": c.dataset.test_gallery_mask}
        ctx = EvalContext(embeddings, labels, backend=r.evaluation.backend,
                          memory_budget_mb=r.evaluation.memory_budget_mb, seed=r.run.seed, **masks)
        metrics = run_evaluators([ev for _, ev in c.evaluators], ctx)
        self.knn_backend = getattr(ctx, "backend_used", None) or self.knn_backend
        self._last_eval_ctx = ctx
        return metrics

    def _record_eval(self, split: str, metrics: dict[str, float]) -> None:
        if self.dist.is_main:
            rundir.append_metrics(self.directory, {"epoch": self.epoch, "step": self.step, "split": split,
                                                   "time": time.time(), **metrics})
        self.host.pm.hook.on_eval_end(run=self, epoch=self.epoch, split=split, metrics=metrics)

    def _is_better(self, value: float) -> bool:
        if self.best_value is None:
            return True
        if self.recipe.recipe.evaluation.mode == "max":
            return value > self.best_value
        return value < self.best_value

    def _selection_value(self, metrics: dict[str, float]) -> float:
        name = self.recipe.recipe.evaluation.metric
        if name not in metrics:
            raise RunError(
                f"evaluation.metric {name!r} is not produced by the recipe's evaluators",
                where="[evaluation] metric",
                fix="choose one of: " + ", ".join(sorted(metrics)),
            )
        return float(metrics[name])

    # ------------------------------------------------------------------------------------------
    def checkpoint_state(self) -> dict[str, Any]:
        """Everything needed to continue the run."""
        c = self.components
        generator = self.train_loader.generator
        if not self.epoch_complete:  # mid-epoch: the loader restarts the epoch, from its start state
            generator_state = getattr(self, "_epoch_generator_state", None)
        else:
            generator_state = generator.get_state() if generator is not None else None
        return {
            "format": 2,
            "epoch": self.epoch,
            "step": self.step,
            "epoch_step": self.epoch_step,
            "epoch_complete": self.epoch_complete,
            "world_size": self.dist.world_size,
            "initial_metrics": self.initial_metrics,
            "last_metrics": self.last_metrics,
            "knn_backend": self.knn_backend,
            "loader_generator": generator_state,
            "model": c.model.state_dict(),
            "loss": c.loss.state_dict() if isinstance(c.loss, torch.nn.Module) else None,
            "miner": c.miner.state_dict() if isinstance(c.miner, torch.nn.Module) else None,
            "regularizers": {reg.name: reg.module.state_dict() for reg in c.regularizers
                             if isinstance(reg.module, torch.nn.Module)},
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.scaler.state_dict(),
            "ema": c.ema_model.state_dict() if c.ema_model is not None else None,
            "best": {"value": self.best_value, "epoch": self.best_epoch, "metrics": self.best_metrics},
            "rng": rng_state(),
            "recipe": self.recipe.dumps(),
        }

    def save(self, name: str) -> Path:
        """Write ``checkpoints/<name>.pt`` atomically and notify ``on_checkpoint`` (rank 0 only writes)."""
        path = self.checkpoint_dir / f"{name}.pt"
        if self.dist.is_main:
            save_checkpoint(path, self.checkpoint_state())
            self.host.pm.hook.on_checkpoint(run=self, path=path)
        return path

    # ------------------------------------------------------------------------------------------
    def prepare_training(self) -> None:
        """Engine services between :meth:`build` and training.

        Wraps the batch sampler in a :class:`~dmlplug.engine.distributed.BatchPlan` (rank slices, skipping
        of batches trained before a resume, per-sample augmentation seeds) and reloads the training data
        through it; applies ``[run]`` channels_last / compile; in a distributed run, synchronises the
        initial state from rank 0, converts BatchNorm to SyncBatchNorm on CUDA and gathers model outputs.
        """
        from torch.utils.data import DataLoader

        c, r = self.components, self.recipe.recipe
        self.dist = distributed.current()
        old = self.train_loader
        self.batch_plan = distributed.BatchPlan(c.sampler, self.dist.rank, self.dist.world_size, seed=r.run.seed)
        self.train_loader = DataLoader(
            SeededDataset(old.dataset), batch_sampler=self.batch_plan, num_workers=old.num_workers,
            collate_fn=old.collate_fn, pin_memory=old.pin_memory, worker_init_fn=old.worker_init_fn,
            generator=old.generator, persistent_workers=old.persistent_workers,
            prefetch_factor=old.prefetch_factor if old.num_workers > 0 else None,
        )
        self.channels_last = bool(r.run.channels_last)
        if self.channels_last:
            c.model.to(memory_format=torch.channels_last)
        self._model_params = list(c.model.parameters())
        self._trained_params = [p for g in self.optimizer.param_groups for p in g["params"]]
        if self.dist.enabled:
            if self.device.startswith("cuda"):
                c.model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(c.model)
            for module in (c.model, c.loss, c.miner, *(reg.module for reg in c.regularizers), c.ema_model):
                distributed.broadcast_module(module)
            self.gatherer.attach(c.model)
            if c.ema_model is not None:
                self.gatherer.attach(c.ema_model)
        if r.run.compile:
            c.model.compile()

    def restore(self, state: dict[str, Any]) -> None:
        """Load a checkpoint written by :meth:`checkpoint_state`; training continues where it was written.

        Raises:
            RunError: The checkpoint does not fit the built components (a forced recipe change).
        """
        c = self.components
        try:
            c.model.load_state_dict(state["model"])
            for key, module in (("loss", c.loss), ("miner", c.miner)):
                if isinstance(module, torch.nn.Module) and state.get(key) is not None:
                    module.load_state_dict(state[key])
            saved_regs = state.get("regularizers") or {}
            for reg in c.regularizers:
                if isinstance(reg.module, torch.nn.Module) and reg.name in saved_regs:
                    reg.module.load_state_dict(saved_regs[reg.name])
            if c.ema_model is not None and state.get("ema") is not None:
                c.ema_model.load_state_dict(state["ema"])
            self.optimizer.load_state_dict(state["optimizer"])
            if self.scheduler is not None and state.get("scheduler") is not None:
                self.scheduler.load_state_dict(state["scheduler"])
            if state.get("scaler"):
                self.scaler.load_state_dict(state["scaler"])
        except (RuntimeError, KeyError, ValueError) as exc:
            raise RunError(f"the checkpoint does not fit the recipe: {type(exc).__name__}: {exc}",
                           where=str(self.checkpoint_dir / _resume.LAST),
                           fix="resume with the recipe the run was started with (drop --force and the changes)",
                           ) from exc
        best = state.get("best") or {}
        self.best_value, self.best_epoch = best.get("value"), best.get("epoch")
        self.best_metrics = dict(best.get("metrics") or {})
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        self.epoch_step = int(state.get("epoch_step", 0))
        self.epoch_complete = bool(state.get("epoch_complete", True))
        self.initial_metrics = dict(state.get("initial_metrics") or {})
        self.last_metrics = dict(state.get("last_metrics") or {})
        self.knn_backend = state.get("knn_backend")
        generator = self.train_loader.generator
        if generator is not None and state.get("loader_generator") is not None:
            generator.set_state(state["loader_generator"])
        set_rng_state(state["rng"])
        self.resume_state = state

    # ------------------------------------------------------------------------------------------
    def train_epoch(self, skip: int = 0) -> None:
        """One pass over the epoch's batches; the first ``skip`` were trained before a resume.

        Writes a mid-epoch checkpoint every ``run.checkpoint_every_steps`` steps, and stops after the
        current step (checkpoint written, :class:`~dmlplug.engine.resume.RunInterrupted` raised) once a
        SIGTERM/SIGINT arrived.
        """
        c, r = self.components, self.recipe.recipe
        if self.batch_plan is None:  # a Run driven by hand: build() then train_epoch()
            self.prepare_training()
        self.batch_plan.set_epoch(self.epoch, skip)
        self.epoch_step, self.epoch_complete = skip, False
        generator = self.train_loader.generator
        self._epoch_generator_state = generator.get_state() if generator is not None else None
        freeze_backbone(c.model, self.epoch <= c.warmup_epochs)
        c.model.train()
        for module in (c.loss, *(reg.module for reg in c.regularizers)):
            if isinstance(module, torch.nn.Module):
                module.train()
        every, batches = r.run.checkpoint_every_steps, len(c.sampler)
        for images, labels, indices in self.train_loader:
            self.step += 1
            self.epoch_step += 1
            images = images.to(self.device, non_blocking=True)
            if self.channels_last and images.dim() == 4:
                images = images.contiguous(memory_format=torch.channels_last)
            labels = labels.to(self.device, non_blocking=True)
            if self.dist.enabled:  # losses and miners see the global batch (model outputs are gathered too)
                labels = distributed.gather_plain(labels)
                indices = distributed.gather_plain(indices.to(self.device)).cpu()
            self.gatherer.active = self.dist.enabled
            try:
                terms = self._forward_terms(images, labels, indices)
            finally:
                self.gatherer.active = False
            total = sum(terms.values())
            values = {name: float(value.detach()) for name, value in terms.items()}
            values["total"] = float(total.detach())
            bad = [name for name, value in values.items() if not math.isfinite(value)]
            if bad:
                raise RunError(
                    f"loss term {bad[0]!r} is {values[bad[0]]} at step {self.step} (epoch {self.epoch})",
                    where=f"run directory {self.directory}",
                    fix="lower the learning rate or the term's weight; the last good checkpoint is kept in "
                        f"{self.checkpoint_dir}",
                )
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(total).backward()
            if self.dist.enabled:
                distributed.sum_gradients(self._model_params, self._trained_params)
            if r.run.grad_clip is not None:
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(
                    [p for g in self.optimizer.param_groups for p in g["params"]], r.run.grad_clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.after_optimizer_step()
            self.host.pm.hook.on_step_end(run=self, step=self.step, losses=values)
            stop = distributed.any_rank(self.stop_signal is not None)
            if stop or (every and self.epoch_step % every == 0 and self.epoch_step < batches):
                self._checkpoint(False)
            if stop:
                self._raise_interrupted()

    def _forward_terms(self, images: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor) -> dict[str, Any]:
        c = self.components
        images, views = split_views(images)
        autocast = (torch.autocast(device_type="cuda", dtype=self.autocast) if self.autocast is not None
                    else _nullcontext())
        with autocast:
            out = c.model(images)
        self._check_outputs(out)
        embeddings = out.embedding.float()
        # [loss] embedding: the loss and miner train one named embedding of a multi-head model.
        train_embeddings = out.named[c.loss_embedding].float() if c.loss_embedding else embeddings
        indices_tuple = c.miner(train_embeddings, labels) if c.miner is not None else None
        terms = {"loss": c.loss_weight * c.loss(train_embeddings, labels, indices_tuple)}
        if c.ema_model is not None:
            c.ema_model.train(c.model.training)
        step = StepOutput(
            embeddings=embeddings, labels=labels, features=out.features, feature_map=out.feature_map,
            named_embeddings=out.named, loss_module=c.loss, indices=indices, images=images, views=views,
            epoch=self.epoch, step=self.step, model=c.model, ema_model=c.ema_model,
        )
        self._last_step = step
        for reg in c.regularizers:
            value = reg.module(step)
            if isinstance(value, dict):
                for sub, term in value.items():
                    terms[f"{reg.name}/{sub}"] = reg.weight * term
            else:
                terms[reg.name] = reg.weight * value
        return terms

    def _check_outputs(self, out: Any) -> None:
        """Fail clearly when the model does not give what a component required (checked on every step)."""
        c = self.components
        problem = None
        if "feature_map" in c.needs and out.feature_map is None:
            problem = ("the backbone gave no feature map", "feature_map",
                       "choose a convolutional backbone (token models such as ViT have no spatial map)")
        elif "named_embeddings" in c.needs and not out.named:
            problem = ("the head gave no named embeddings", "named_embeddings", 'use a multi-head head ("multi")')
        elif c.loss_embedding and c.loss_embedding not in out.named:
            raise RunError(
                f"[loss] embedding = {c.loss_embedding!r} is not an output of the head",
                where="[loss] embedding", fix="choose one of: " + ", ".join(out.named) if out.named else
                "remove `embedding` from [loss]: the head gives a single embedding",
            )
        if problem is not None:
            what, service, fix = problem
            raise RunError(f"{what}, but {', '.join(c.needs.by[service])} requires it",
                           where="[backbone] / [head]", fix=fix)

    def after_optimizer_step(self) -> None:
        """Engine services after each optimizer step.

        Updates the EMA copy, then calls every component's ``after_optimizer_step(step)`` (loss, miner,
        regularizers) with the step just trained.
        """
        c = self.components
        step = getattr(self, "_last_step", None)
        if c.ema_model is not None:
            ema_update(c.ema_model, c.model, self.ema_momentum)
        if step is None:
            return
        for module in (c.loss, c.miner, *(reg.module for reg in c.regularizers)):
            hook = getattr(module, "after_optimizer_step", None)
            if callable(hook):
                hook(step)
        self._last_step = None  # do not keep the step's tensors alive until the next step

    # ------------------------------------------------------------------------------------------
    def execute(self) -> RunResult:
        """Initial evaluation, training epochs with periodic evaluation, final results.

        After :meth:`restore`, continues at the checkpointed position (no initial evaluation again).
        """
        r = self.recipe.recipe
        split = r.evaluation.split
        if split == "val" and self.components.dataset.val is None:
            raise RunError("evaluation.split is 'val' but the dataset has no validation split",
                           where="[evaluation] split", fix="set val_classes in [data.dataset] or use split = 'test'")
        first, skip = 1, 0
        if self.resume_state is not None:
            first = self.epoch + 1 if self.epoch_complete else self.epoch
            skip = 0 if self.epoch_complete else self.epoch_step
        elif r.evaluation.initial or r.run.epochs == 0:
            self.initial_metrics = self._evaluate(split)
            self._record_eval(split, self.initial_metrics)
            self.last_metrics = self.initial_metrics
            self._checkpoint(self._update_best(self.initial_metrics))
        for epoch in range(first, r.run.epochs + 1):
            if distributed.any_rank(self.stop_signal is not None):  # arrived during an evaluation
                self._checkpoint(False)
                self._raise_interrupted()
            self.epoch = epoch
            self.host.pm.hook.on_epoch_start(run=self, epoch=epoch)
            self.train_epoch(skip)
            skip = 0
            evaluate_now = epoch % r.evaluation.every == 0 or epoch == r.run.epochs
            improved = False
            if evaluate_now:
                self.last_metrics = self._evaluate(split)
                self._record_eval(split, self.last_metrics)
                improved = self._update_best(self.last_metrics)
            if self.scheduler is not None:
                if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                    if evaluate_now:
                        value = self._selection_value(self.last_metrics)
                        self.scheduler.step(value if r.evaluation.mode == "max" else -value)
                else:
                    self.scheduler.step()
            self.epoch_complete = True
            self._checkpoint(evaluate_now and improved)
        if self.dist.is_main:
            self._write_artifacts()
        return self.result("completed")

    def _evaluate(self, split: str) -> dict[str, float]:
        """:meth:`evaluate`, with BatchNorm buffers synchronised first and out-of-memory explained."""
        r = self.recipe.recipe
        distributed.broadcast_module(self.components.model, buffers_only=True)
        try:
            return self.evaluate(split)
        except (MemoryError, RuntimeError) as exc:
            if not is_out_of_memory(exc):
                raise
            raise RunError(
                f"out of memory while evaluating the {split} split: {type(exc).__name__}",
                where="[data] eval_batch_size / [evaluation] memory_budget_mb",
                fix=f"lower data.eval_batch_size (now {r.data.eval_batch_size}) or evaluation.memory_budget_mb "
                    f"(now {r.evaluation.memory_budget_mb}), e.g. --set data.eval_batch_size="
                    f"{max(1, r.data.eval_batch_size // 2)}; the last checkpoint is kept in {self.checkpoint_dir}",
            ) from exc

    def _raise_interrupted(self) -> None:
        import signal

        signum = self.stop_signal or signal.SIGTERM
        distributed.barrier()  # every rank leaves after rank 0 has written the checkpoint
        raise _resume.RunInterrupted(
            f"interrupted by {signal.Signals(signum).name} at step {self.step} (epoch {self.epoch}); "
            "checkpoint written", signum=signum, where=str(self.directory),
            fix=f"continue with: dmlplug run {self.directory} --resume")

    def _checkpoint(self, improved: bool) -> None:
        """Save last.pt; when the selection metric improved, best.pt becomes a copy of it (atomically).

        Collective in a distributed run (BatchNorm buffers come from rank 0); only rank 0 writes.
        """
        distributed.broadcast_module(self.components.model, buffers_only=True)
        last = self.save("last")
        if improved and self.dist.is_main:
            tmp = self.checkpoint_dir / ".best.pt.tmp"
            try:
                shutil.copyfile(last, tmp)
                tmp.replace(self.checkpoint_dir / "best.pt")
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                raise RunError(f"could not write {self.checkpoint_dir / 'best.pt'}: {exc.strerror or exc}",
                               where=str(self.checkpoint_dir),
                               fix="free disk space; last.pt and the previous best.pt are intact") from exc

    def _update_best(self, metrics: dict[str, float]) -> bool:
        value = self._selection_value(metrics)
        if self._is_better(value):
            self.best_value, self.best_epoch, self.best_metrics = value, self.epoch, dict(metrics)
            return True
        return False

    def _write_artifacts(self) -> None:
        ctx = getattr(self, "_last_eval_ctx", None)
        if ctx is None:
            return
        for _, evaluator in self.components.evaluators:
            write = getattr(evaluator, "write_artifacts", None)
            if callable(write):
                write(ctx, self.directory)

    def result(self, status: str, error: BaseException | None = None) -> RunResult:
        """Write ``results.json`` and return the result."""
        result = RunResult(self.directory, status, self.initial_metrics, self.last_metrics, self.best_metrics,
                           self.best_epoch)
        payload = {
            "status": status,
            "name": self.recipe.recipe.run.name,
            "epochs_completed": self.epoch,
            "steps": self.step,
            "selection_metric": self.recipe.recipe.evaluation.metric,
            "initial_metrics": self.initial_metrics,
            "metrics": self.last_metrics,
            "best_metrics": self.best_metrics,
            "best_epoch": self.best_epoch,
            "knn_backend": self.knn_backend,
        }
        if error is not None:
            payload["error"] = str(error)
        if self.dist.is_main and self.directory.is_dir():
            write_json(self.directory / rundir.RESULTS, payload)
        return result


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None
