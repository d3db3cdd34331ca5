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
from dmlplug.engine import rundir
from dmlplug.engine.atomic import write_json, write_text
from dmlplug.engine.build import Components, build_components
from dmlplug.engine.checkpoint import rng_state, save_checkpoint
from dmlplug.engine.data import TransformedSource, embed_loader, eval_loader, train_loader
from dmlplug.engine.device import autocast_dtype, resolve_device
from dmlplug.engine.model import freeze_backbone
from dmlplug.engine.optim import build_optimizer, build_scheduler, collect_groups
from dmlplug.engine.seeding import seed_everything
from dmlplug.engine.step import StepOutput
from dmlplug.errors import RunError
from dmlplug.plugins import PluginHost, get_host
from dmlplug.recipe import ValidatedRecipe, load_recipe, override_pairs


@dataclass
class RunResult:
    """The outcome of :func:`run_recipe`, as also written to ``results.json``."""

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

    # ------------------------------------------------------------------------------------------
    @property
    def model(self) -> Any:
        """The :class:`~dmlplug.engine.model.EmbeddingModel` being trained."""
        return self.components.model

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
        groups = collect_groups([
            ("backbone", c.model.backbone), ("head", c.model.head), ("loss", c.loss),
            *((reg.name, reg.module) for reg in c.regularizers),
        ])
        self.optimizer = build_optimizer(groups, r.optimizer)
        self.scheduler = build_scheduler(self.optimizer, r.scheduler, r.run.epochs)
        self.autocast = autocast_dtype(r.run.precision, self.device)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.autocast == torch.float16)
        self.train_loader = train_loader(
            TransformedSource(c.dataset.train, c.train_transform), c.sampler,
            workers=r.data.workers, device=self.device, seed=r.run.seed,
        )

    # ------------------------------------------------------------------------------------------
    def evaluate(self, split: str = "test") -> dict[str, float]:
        """Embed ``split`` and run every evaluator; returns the metrics."""
        from dmlplug.evaluation import EvalContext, run_evaluators

        c, r = self.components, self.recipe.recipe
        source = getattr(c.dataset, split)
        loader = eval_loader(TransformedSource(source, c.test_transform), batch_size=r.data.eval_batch_size,
                             workers=r.data.workers, device=self.device)
        embeddings, labels = embed_loader(c.model, loader, self.device, self.autocast)
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
        return {
            "epoch": self.epoch,
            "step": self.step,
            "model": c.model.state_dict(),
            "loss": c.loss.state_dict() if isinstance(c.loss, torch.nn.Module) else None,
            "miner": c.miner.state_dict() if isinstance(c.miner, torch.nn.Module) else None,
            "regularizers": {reg.name: reg.module.state_dict() for reg in c.regularizers
                             if isinstance(reg.module, torch.nn.Module)},
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.scaler.state_dict(),
            "best": {"value": self.best_value, "epoch": self.best_epoch, "metrics": self.best_metrics},
            "rng": rng_state(),
            "recipe": self.recipe.dumps(),
        }

    def save(self, name: str) -> Path:
        """Write ``checkpoints/<name>.pt`` atomically and notify ``on_checkpoint``."""
        path = save_checkpoint(self.checkpoint_dir / f"{name}.pt", self.checkpoint_state())
        self.host.pm.hook.on_checkpoint(run=self, path=path)
        return path

    # ------------------------------------------------------------------------------------------
    def train_epoch(self) -> None:
        """One pass over the sampler's batches."""
        c, r = self.components, self.recipe.recipe
        if hasattr(c.sampler, "set_epoch"):
            c.sampler.set_epoch(self.epoch)
        freeze_backbone(c.model, self.epoch <= c.warmup_epochs)
        c.model.train()
        for module in (c.loss, *(reg.module for reg in c.regularizers)):
            if isinstance(module, torch.nn.Module):
                module.train()
        for images, labels, indices in self.train_loader:
            self.step += 1
            images = images.to(self.device, non_blocking=True)
            labels = labels.to(self.device, non_blocking=True)
            terms = self._forward_terms(images, labels, indices)
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
            if r.run.grad_clip is not None:
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(
                    [p for g in self.optimizer.param_groups for p in g["params"]], r.run.grad_clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.host.pm.hook.on_step_end(run=self, step=self.step, losses=values)

    def _forward_terms(self, images: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor) -> dict[str, Any]:
        c = self.components
        autocast = (torch.autocast(device_type="cuda", dtype=self.autocast) if self.autocast is not None
                    else _nullcontext())
        with autocast:
            out = c.model(images)
        embeddings = out.embedding.float()
        indices_tuple = c.miner(embeddings, labels) if c.miner is not None else None
        terms = {"loss": c.loss_weight * c.loss(embeddings, labels, indices_tuple)}
        step = StepOutput(
            embeddings=embeddings, labels=labels, features=out.features, feature_map=out.feature_map,
            named_embeddings=out.named, loss_module=c.loss, indices=indices, epoch=self.epoch, step=self.step,
            model=c.model,
        )
        for reg in c.regularizers:
            value = reg.module(step)
            if isinstance(value, dict):
                for sub, term in value.items():
                    terms[f"{reg.name}/{sub}"] = reg.weight * term
            else:
                terms[reg.name] = reg.weight * value
        return terms

    # ------------------------------------------------------------------------------------------
    def execute(self) -> RunResult:
        """Initial evaluation, training epochs with periodic evaluation, final results."""
        r = self.recipe.recipe
        split = r.evaluation.split
        if split == "val" and self.components.dataset.val is None:
            raise RunError("evaluation.split is 'val' but the dataset has no validation split",
                           where="[evaluation] split", fix="set val_classes in [data.dataset] or use split = 'test'")
        if r.evaluation.initial or r.run.epochs == 0:
            self.initial_metrics = self.evaluate(split)
            self._record_eval(split, self.initial_metrics)
            self.last_metrics = self.initial_metrics
            self._checkpoint(self._update_best(self.initial_metrics))
        for epoch in range(1, r.run.epochs + 1):
            self.epoch = epoch
            self.host.pm.hook.on_epoch_start(run=self, epoch=epoch)
            self.train_epoch()
            evaluate_now = epoch % r.evaluation.every == 0 or epoch == r.run.epochs
            improved = False
            if evaluate_now:
                self.last_metrics = self.evaluate(split)
                self._record_eval(split, self.last_metrics)
                improved = self._update_best(self.last_metrics)
            if self.scheduler is not None:
                if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                    if evaluate_now:
                        value = self._selection_value(self.last_metrics)
                        self.scheduler.step(value if r.evaluation.mode == "max" else -value)
                else:
                    self.scheduler.step()
            self._checkpoint(evaluate_now and improved)
        self._write_artifacts()
        return self.result("completed")

    def _checkpoint(self, improved: bool) -> None:
        """Save last.pt; when the selection metric improved, best.pt becomes a copy of it (atomically)."""
        last = self.save("last")
        if improved:
            tmp = self.checkpoint_dir / ".best.pt.tmp"
            shutil.copyfile(last, tmp)
            tmp.replace(self.checkpoint_dir / "best.pt")

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
        write_json(self.directory / rundir.RESULTS, payload)
        return result


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def run_recipe(
    recipe: str | Path | dict[str, Any] | ValidatedRecipe,
    overrides: list[str] | dict[str, Any] | None = None,
    *,
    out: str | Path | None = None,
    device: str | None = None,
    quiet: bool = False,
    host: PluginHost | None = None,
) -> RunResult:
    """Validate, build and train a recipe; returns the :class:`RunResult`.

    Nothing is written until every component has been built, so bad input (unknown names, missing
    dataset, unwritable output) leaves no run directory behind.
    """
    host = host or get_host()
    pairs = override_pairs(overrides)
    if device is not None:
        pairs["run.device"] = device
    validated = recipe if isinstance(recipe, ValidatedRecipe) else load_recipe(recipe, pairs, registry=host.registry)
    r = validated.recipe
    directory = rundir.choose_run_dir(r.run.output_dir, r.run.name, out)
    rundir.check_writable(directory)
    resolved_device = resolve_device(r.run.device)
    run = Run(validated, directory, host, resolved_device, quiet)
    run.build()

    directory.mkdir(parents=True, exist_ok=True)
    write_text(directory / rundir.RESOLVED_RECIPE, validated.dumps())
    write_json(directory / rundir.ENVIRONMENT, rundir.environment_record(resolved_device, r.run.seed, host))
    logger_names = []
    for i, (name, logger) in enumerate(run.components.loggers):
        logger_names.append(f"run-logger-{i}-{name}")
        host.register_run_plugin(logger, logger_names[-1])
    status, error = "failed", None
    try:
        host.pm.hook.on_run_start(run=run)
        result = run.execute()
        status = "completed"
        _finalise_environment(run)
        return result
    except KeyboardInterrupt as exc:
        status, error = "interrupted", exc
        run.result(status, exc)
        raise
    except BaseException as exc:
        error = exc
        run.result(status, exc)
        raise
    finally:
        try:
            host.pm.hook.on_run_end(run=run, status=status, error=error)
        finally:
            for name in logger_names:
                host.unregister_run_plugin(name)


def _finalise_environment(run: Run) -> None:
    # The kNN backend is only known after the first evaluation.
    import json

    path = run.directory / rundir.ENVIRONMENT
    record = json.loads(path.read_text())
    record["knn_backend"] = run.knn_backend
    write_json(path, record)
