"""One optimizer step: forward pass, loss terms, backward, gradient sync and clipping, optimizer step, services.

Under torchrun, labels, indices and every model output of the step are gathered across ranks, so losses,
miners and regularizers see the global batch (see :mod:`dmlplug.engine.distributed`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

from dmlplug.engine import distributed
from dmlplug.engine.assembly import Training
from dmlplug.engine.build import Components
from dmlplug.engine.data import split_views
from dmlplug.engine.model import ema_update
from dmlplug.errors import RunError
from dmlplug.protocols import HasAfterOptimizerStep
from dmlplug.step import StepOutput


class TrainStep:
    """Trains one batch; holds what every step needs and nothing that changes between steps.

    Args:
        components: The built components (read on every step: a component replaced after the build is used).
        training: Optimizer, scaler, autocast dtype, EMA momentum.
        device: Where training runs.
        grad_clip: Maximum gradient norm (``[run] grad_clip``), or ``None``.
        channels_last: Whether 4-d inputs are converted to channels-last memory format.
        directory: The run directory (named when a loss term is not finite).
        dist: This process's :class:`~dmlplug.engine.distributed.DistInfo`.
        gatherer: The forward hook that gathers model outputs across ranks during a step.
    """

    def __init__(self, components: Components, training: Training, *, device: str, grad_clip: float | None,
                 channels_last: bool, directory: Path, dist: distributed.DistInfo,
                 gatherer: distributed.OutputGatherer):
        from dmlplug.engine.ddp import DataParallelModel

        self.components = components
        self.training = training
        self.device = device
        self.grad_clip = grad_clip
        self.channels_last = channels_last
        self.directory = directory
        self.dist = dist
        self.gatherer = gatherer
        self.model_params = list(components.model.parameters())
        self.trained_params = [p for g in training.optimizer.param_groups for p in g["params"]]
        model_ids = {id(p) for p in self.model_params}
        #: Trained parameters outside the model (loss proxies …): averaged over ranks after backward.
        self.other_params = [p for p in self.trained_params if id(p) not in model_ids]
        #: The training forward pass: through DistributedDataParallel when distributed, else the plain model.
        self.forward_model = DataParallelModel(device, enabled=dist.enabled)

    def __call__(self, images: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor, *, epoch: int,
                 step: int) -> dict[str, torch.Tensor]:
        """Train one batch as optimizer step ``step``; returns every loss term and ``"total"``, on the device.

        Nothing here reads a value back to the host (no sync): the terms are checked for non-finite values
        later, by :class:`~dmlplug.engine.losslog.LossLog`, before any checkpoint is written.
        """
        images = images.to(self.device, non_blocking=True)
        if self.channels_last and images.dim() == 4:
            images = images.contiguous(memory_format=torch.channels_last)
        labels = labels.to(self.device, non_blocking=True)
        if self.dist.enabled:  # losses and miners see the global batch (model outputs are gathered too)
            labels = distributed.gather_plain(labels)
            indices = distributed.gather_plain(indices.to(self.device)).cpu()
        self.gatherer.active = self.dist.enabled
        try:
            terms, output = self.forward_terms(images, labels, indices, epoch=epoch, step=step)
        finally:
            self.gatherer.active = False
        total = sum(terms.values())
        values = {name: value.detach() if isinstance(value, torch.Tensor) else value for name, value in terms.items()}
        values["total"] = total.detach()
        self._optimize(total)
        self.after_optimizer_step(output)
        return values

    def forward_terms(self, images: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor, *, epoch: int,
                      step: int) -> tuple[dict[str, Any], StepOutput]:
        """The weighted loss terms of one batch (``"loss"``, then each regularizer's) and the step's outputs."""
        c, autocast = self.components, self.training.autocast
        images, views = split_views(images)
        amp = torch.autocast(device_type="cuda", dtype=autocast) if autocast is not None else contextlib.nullcontext()
        with amp:
            out = self.forward_model(c.model, images)
        check_outputs(out, c)
        embeddings = out.embedding.float()
        # [loss] embedding: the loss and miner train one named embedding of a multi-head model.
        train_embeddings = out.named[c.loss_embedding].float() if c.loss_embedding else embeddings
        indices_tuple = c.miner(train_embeddings, labels) if c.miner is not None else None
        terms = {"loss": c.loss_weight * c.loss(train_embeddings, labels, indices_tuple)}
        if c.ema_model is not None:
            c.ema_model.train(c.model.training)
        output = StepOutput(
            embeddings=embeddings, labels=labels, features=out.features, feature_map=out.feature_map,
            named_embeddings=out.named, loss_module=c.loss, indices=indices, images=images, views=views,
            epoch=epoch, step=step, model=c.model, ema_model=c.ema_model,
        )
        for reg in c.regularizers:
            value = reg.module(output)
            if isinstance(value, dict):
                for sub, term in value.items():
                    terms[f"{reg.name}/{sub}"] = reg.weight * term
            else:
                terms[reg.name] = reg.weight * value
        return terms, output

    def after_optimizer_step(self, output: StepOutput | None) -> None:
        """Engine services after each optimizer step: the EMA update, then every component's own.

        The components' ``after_optimizer_step(step)`` (loss, miner, regularizers, see
        :class:`~dmlplug.protocols.HasAfterOptimizerStep`) get the step just trained.
        """
        c = self.components
        if c.ema_model is not None:
            assert self.training.ema_momentum is not None  # assemble() sets it with ema_model
            ema_update(c.ema_model, c.model, self.training.ema_momentum)
        if output is None:
            return
        for module in c.trainable().values():
            if isinstance(module, HasAfterOptimizerStep):
                module.after_optimizer_step(output)

    def _optimize(self, total: torch.Tensor) -> None:
        optimizer, scaler = self.training.optimizer, self.training.scaler
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(total).backward()  # under DDP the model's gradients are summed over ranks meanwhile
        if self.dist.enabled:
            self.forward_model.reduce(self.components.model)  # what DDP left out (see engine/ddp.py)
            distributed.average_gradients(self.other_params)
        if self.grad_clip is not None:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], self.grad_clip)
        scaler.step(optimizer)
        scaler.update()


def check_outputs(out: Any, components: Components) -> None:
    """Fail clearly when the model's output contradicts what the backbone and head declared.

    ``dmlplug validate`` already rejects a recipe whose backbone or head does not *declare* what a component
    requires (tags ``feature_map``, ``multi_head``, the head's embedding names). This guard catches only what
    validation cannot know: a backbone or head that declares a capability and does not deliver it, or a
    head whose embedding names are not known before it is built.

    Raises:
        RunError: The output lacks the feature map, the named embeddings or the ``[loss] embedding``.
    """
    needs, name = components.needs, components.loss_embedding
    problem = None
    if "feature_map" in needs and out.feature_map is None:
        problem = ("backbone", "feature map", "feature_map")
    elif "named_embeddings" in needs and not out.named:
        problem = ("head", "named embeddings", "named_embeddings")
    elif name and name not in out.named:
        raise RunError(
            f"[loss] embedding = {name!r} is not an output of the head",
            where="[loss] embedding", fix="choose one of: " + ", ".join(out.named) if out.named else
            "remove `embedding` from [loss]: the head gives a single embedding",
        )
    if problem is not None:
        section, what, service = problem
        raise RunError(
            f"the {section} gave no {what}, but {', '.join(needs.by[service])} requires it (the {section} "
            f"declares it can give one, so the recipe validated)",
            where=f"[{section}]",
            fix=f"report this to the {section} plugin's author (its tags do not match its output); meanwhile "
                f"choose another {section}",
        )
