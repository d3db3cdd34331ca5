"""The training machinery around the built components: device, EMA copy, optimizer, schedule, precision, loader.

:func:`assemble` runs once per run, after :func:`~dmlplug.engine.build.build_components`; what it returns
(:class:`Training`) is what the train step, the epoch loop and the checkpoints work with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dmlplug.context import BuildContext
from dmlplug.data.transforms import accepts_tensors, random_sources
from dmlplug.devices import autocast_dtype
from dmlplug.engine.batches import BatchPlan
from dmlplug.engine.build import Components, build_component
from dmlplug.engine.data import TransformedSource, train_loader
from dmlplug.engine.model import make_ema_copy
from dmlplug.engine.optim import ParamGroup, collect_groups, param_groups
from dmlplug.engine.seeding import SeededDataset
from dmlplug.errors import RunError
from dmlplug.protocols import HasEmaMomentum


@dataclass
class Training:
    """What trains the components.

    Attributes:
        optimizer: The optimizer (``[optimizer]``, a registered component); every parameter group carries its
            ``name``.
        scheduler: The per-epoch learning-rate schedule (``[scheduler]``, a registered component:
            :class:`dmlplug.protocols.LRSchedule`).
        scaler: The AMP gradient scaler (enabled for fp16 only).
        autocast: The CUDA autocast dtype, or ``None`` for fp32.
        ema_momentum: Momentum of the EMA copy, when a component requires ``"ema"``.
        batch_plan: The epoch's batches for this rank (:class:`~dmlplug.engine.batches.BatchPlan`).
        loader: The training DataLoader over the batch plan.
    """

    optimizer: Any
    scheduler: Any
    scaler: Any
    autocast: Any
    ema_momentum: float | None
    batch_plan: BatchPlan
    loader: Any


def assemble(components: Components, recipe: Any, *, device: str, rank: int = 0, world_size: int = 1) -> Training:
    """Move the components to ``device``, create the EMA copy, the optimizer, schedule, scaler and loader.

    Args:
        components: The built components (``components.ema_model`` is set here when needed).
        recipe: The recipe's :class:`~dmlplug.recipe.Recipe` model.
        device: Where training runs.
        rank: This process's rank (the loader yields its slice of every global batch).
        world_size: Number of processes.

    Raises:
        RunError: A component that requires ``"ema"`` gives no valid momentum, or two give different ones.
    """
    c = components
    c.model.to(device)
    for module in c.trainable().values():
        if isinstance(module, torch.nn.Module):
            module.to(device)
    momentum = None
    if "ema" in c.needs:
        momentum = ema_momentum(c)
        c.ema_model = make_ema_copy(c.model)
    optimizer, schedule = build_optimizer(c, epochs=recipe.run.epochs)
    autocast = autocast_dtype(recipe.run.precision, device)
    plan = BatchPlan(c.sampler, rank, world_size, seed=recipe.run.seed)
    # SeededDataset is map-style without subclassing torch's Dataset (seeding.py imports no torch at import).
    train = TransformedSource(c.dataset.train, c.train_transform, tensors=accepts_tensors(c.train_transform))
    seeded = SeededDataset(train, random_sources(c.train_transform))
    loader = train_loader(seeded, plan, workers=recipe.data.workers, device=device,  # type: ignore[arg-type]
                          seed=recipe.run.seed)
    return Training(
        optimizer=optimizer,
        scheduler=schedule,
        scaler=torch.amp.GradScaler("cuda", enabled=autocast == torch.float16),
        autocast=autocast,
        ema_momentum=momentum,
        batch_plan=plan,
        loader=loader,
    )


def build_optimizer(components: Components, *, epochs: int) -> tuple[Any, Any]:
    """The recipe's optimizer over the trained parameter groups, and its learning-rate schedule.

    The optimizer is built with ``ctx.param_groups`` (:func:`~dmlplug.engine.optim.param_groups`: the groups of
    :func:`trainable_groups` with ``[optimizer]``'s learning rates and weight decays applied), the schedule
    with ``ctx.optimizer`` and ``ctx.epochs``.

    Raises:
        RecipeError: An ``[optimizer.groups.<name>]`` names no group.
        ComponentError: A factory failed, or returned no optimizer / schedule (its kind's protocol).
    """
    c = components
    ctx = c.context if c.context is not None else BuildContext()
    groups = param_groups(trainable_groups(c), c.optimizer_spec.options)
    optimizer = build_component(c.optimizer_spec, ctx.changed(param_groups=groups))
    schedule = build_component(c.schedule_spec, ctx.changed(optimizer=optimizer, epochs=epochs))
    return optimizer, schedule


def trainable_groups(components: Components) -> list[ParamGroup]:
    """Named parameter groups of the model's backbone and head, the loss and the regularizers.

    Frozen parameters (an EMA copy a component holds, fixed weights) never enter the optimizer; the
    warm-up freeze of the backbone happens later, at the start of each epoch, so it is not affected.
    """
    c = components
    groups = collect_groups([("backbone", c.model.backbone), ("head", c.model.head), ("loss", c.loss),
                             *((reg.name, reg.module) for reg in c.regularizers)])
    for group in groups:
        group.params = [p for p in group.params if p.requires_grad]
    return [g for g in groups if g.params]


def ema_momentum(components: Components) -> float:
    """The EMA momentum asked for by the components that require ``"ema"`` (their ``ema_momentum``).

    Raises:
        RunError: A component gives no momentum in ``[0, 1]``, or two components give different ones.
    """
    modules = {"backbone": components.model.backbone, "head": components.model.head, **components.trainable()}
    momenta: dict[str, float] = {}
    for path in components.needs.by["ema"]:
        module = modules.get(path)
        value = module.ema_momentum if isinstance(module, HasEmaMomentum) else None
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
