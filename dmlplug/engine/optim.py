"""Named optimizer parameter groups, optimizers and learning-rate schedules."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from dmlplug.errors import RecipeError, did_you_mean
from dmlplug.protocols import HasOptimizerParamGroups


@dataclass
class ParamGroup:
    """A named group of parameters with optional component-declared defaults."""

    name: str
    params: list[nn.Parameter]
    lr_mult: float = 1.0
    weight_decay: float | None = None


def module_groups(module: Any, default_name: str) -> list[ParamGroup]:
    """Groups of one component: its own ``optimizer_param_groups()`` or all its parameters in one."""
    if module is None or not isinstance(module, nn.Module):
        return []
    if isinstance(module, HasOptimizerParamGroups):
        return [
            ParamGroup(g["name"], list(g["params"]), float(g.get("lr_mult", 1.0)), g.get("weight_decay"))
            for g in module.optimizer_param_groups()
        ]
    return [ParamGroup(default_name, list(module.parameters()))]


def collect_groups(components: list[tuple[str, Any]]) -> list[ParamGroup]:
    """Groups of every component in order; a parameter shared by two components stays in the first group.

    Args:
        components: ``(default group name, module)`` pairs, e.g. ``("backbone", model.backbone)``.
    """
    seen: set[int] = set()
    groups: list[ParamGroup] = []
    for name, module in components:
        for group in module_groups(module, name):
            # Frozen (warm-up) parameters stay in the optimizer: they train once unfrozen.
            params = [p for p in group.params if id(p) not in seen]
            seen.update(id(p) for p in params)
            if params:
                groups.append(ParamGroup(group.name, params, group.lr_mult, group.weight_decay))
    names = [g.name for g in groups]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise RecipeError(f"two parameter groups share the name(s) {dup}",
                          fix="rename the component's optimizer_param_groups() entries")
    return groups


def build_optimizer(groups: list[ParamGroup], section: Any) -> torch.optim.Optimizer:
    """Build the optimizer; recipe overrides (``[optimizer.groups.<name>]``) beat component defaults.

    Raises:
        RecipeError: An override names a group that does not exist.
    """
    names = {g.name for g in groups}
    for name in section.groups:
        if name not in names:
            raise RecipeError(
                f"optimizer.groups.{name}: no parameter group of that name{did_you_mean(name, names)}",
                fix="groups of this recipe: " + ", ".join(sorted(names)),
            )
    torch_groups = []
    for group in groups:
        override = section.groups.get(group.name)
        lr = section.lr * group.lr_mult
        weight_decay = section.weight_decay if group.weight_decay is None else group.weight_decay
        if override is not None:
            if override.lr is not None:
                lr = override.lr
            elif override.lr_mult is not None:
                lr = section.lr * override.lr_mult
            if override.weight_decay is not None:
                weight_decay = override.weight_decay
        torch_groups.append({"params": group.params, "lr": lr, "weight_decay": weight_decay, "name": group.name})
    if section.name == "adam":
        return torch.optim.Adam(torch_groups, lr=section.lr, betas=section.betas)
    if section.name == "adamw":
        return torch.optim.AdamW(torch_groups, lr=section.lr, betas=section.betas)
    return torch.optim.SGD(torch_groups, lr=section.lr, momentum=section.momentum, nesterov=section.nesterov)


def build_scheduler(optimizer: torch.optim.Optimizer, section: Any, epochs: int) -> Any:
    """Per-epoch schedule (``None`` for ``name = "none"``)."""
    name = section.name
    if name == "none":
        return None
    if name == "step":
        return torch.optim.lr_scheduler.StepLR(optimizer, section.step_size, section.gamma)
    if name == "multistep":
        return torch.optim.lr_scheduler.MultiStepLR(optimizer, section.milestones, section.gamma)
    if name == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="max", factor=section.gamma, patience=section.patience, min_lr=section.min_lr
        )
    base_lrs = [g["lr"] for g in optimizer.param_groups]
    warmup, total = section.warmup_epochs, max(epochs, 1)

    def factor(epoch: int, base: float) -> float:
        if epoch < warmup:
            return (epoch + 1) / (warmup + 1)
        progress = (epoch - warmup) / max(total - warmup, 1)
        floor = section.min_lr / base if base > 0 else 0.0
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, [lambda e, b=b: factor(e, b) for b in base_lrs]
    )
