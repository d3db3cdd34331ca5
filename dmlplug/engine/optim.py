"""Named optimizer parameter groups, and the recipe's per-group learning rates and weight decays.

The optimizer and the learning-rate schedule themselves are registered components (``register_optimizers``,
``register_lr_schedules``), built by :func:`dmlplug.engine.assembly.assemble` over :func:`param_groups`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from dmlplug.errors import RecipeError, did_you_mean
from dmlplug.protocols import HasOptimizerParamGroups


@dataclass
class ParamGroup:
    """A named group of parameters with optional component-declared defaults.

    A group with a ``parent`` is one part of the group the component declares under that name (a layer of a
    backbone with layer-wise learning rates): ``[optimizer.groups.<parent>]`` applies to it, its learning rate
    multiplied by the part's ``lr_mult``.
    """

    name: str
    params: list[nn.Parameter]
    lr_mult: float = 1.0
    weight_decay: float | None = None
    parent: str | None = None

    @property
    def declared(self) -> str:
        """The name a recipe's ``[optimizer.groups.<name>]`` addresses this group by."""
        return self.parent or self.name


def module_groups(module: Any, default_name: str) -> list[ParamGroup]:
    """Groups of one component: its own ``optimizer_param_groups()`` or all its parameters in one."""
    if module is None or not isinstance(module, nn.Module):
        return []
    if isinstance(module, HasOptimizerParamGroups):
        return [
            ParamGroup(g["name"], list(g["params"]), float(g.get("lr_mult", 1.0)), g.get("weight_decay"),
                       g.get("parent"))
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
                groups.append(ParamGroup(group.name, params, group.lr_mult, group.weight_decay, group.parent))
    names = [g.name for g in groups]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise RecipeError(f"two parameter groups share the name(s) {dup}",
                          fix="rename the component's optimizer_param_groups() entries")
    return groups


def param_groups(groups: list[ParamGroup], options: Any) -> list[dict[str, Any]]:
    """The optimizer's parameter groups: recipe overrides (``[optimizer.groups.<name>]``) beat component defaults.

    An override of a group sets its learning rate (``lr``, or ``lr_mult`` times ``[optimizer] lr``) and weight
    decay. An override of a parent (a group declared as several parts: the layers of a backbone with
    ``layer_decay``) sets the learning rate of the whole, which each part multiplies by its own ``lr_mult``.

    Args:
        groups: The named groups of the trained components (:func:`collect_groups`).
        options: The engine's ``[optimizer]`` options (:class:`~dmlplug.recipe.schema.OptimizerOptions`:
            ``lr``, ``weight_decay``, ``groups``).

    Returns:
        ``[{"params", "lr", "weight_decay", "name"}]`` in group order: what an optimizer factory gets in
        ``ctx.param_groups``.

    Raises:
        RecipeError: An override names a group that does not exist.
    """
    names = {g.declared for g in groups}
    for name in options.groups:
        if name not in names:
            raise RecipeError(
                f"optimizer.groups.{name}: no parameter group of that name{did_you_mean(name, names)}",
                fix="groups of this recipe: " + ", ".join(sorted(names)),
            )
    out = []
    for group in groups:
        override = options.groups.get(group.declared)
        lr = options.lr * group.lr_mult
        weight_decay = options.weight_decay if group.weight_decay is None else group.weight_decay
        if override is not None:
            # A part keeps its multiplier under its parent's rate; a whole group takes the override's rate as is.
            part = group.lr_mult if group.parent else 1.0
            if override.lr is not None:
                lr = override.lr * part
            elif override.lr_mult is not None:
                lr = options.lr * override.lr_mult * part
            if override.weight_decay is not None:
                weight_decay = override.weight_decay
        out.append({"params": group.params, "lr": lr, "weight_decay": weight_decay, "name": group.name})
    return out
