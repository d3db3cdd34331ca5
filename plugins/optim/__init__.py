"""Built-in optimizers (adam, adamw, sgd) and learning-rate schedules (none, step, multistep, cosine, plateau).

An optimizer factory gets the named parameter groups in ``ctx.require("param_groups")``, with the recipe's
learning rates and weight decays already applied by the engine (``[optimizer] lr`` / ``weight_decay`` and
``[optimizer.groups.<name>]`` are engine options); its ``Params`` hold only the optimizer's own settings. A
schedule factory gets the built optimizer in ``ctx.require("optimizer")`` and the number of epochs, and returns
an :class:`dmlplug.protocols.LRSchedule` that the engine steps once per epoch with the selection metric, signed
so that larger is better. This module holds the Params, the factories and the registration hooks and stays
torch-free; the schedule classes live in :mod:`.schedules`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from dmlplug import BuildContext, Params, hookimpl

# --------------------------------------------------------------------------------------------------- optimizers


class AdamParams(Params):
    """Parameters of the optimizers ``adam`` and ``adamw``."""

    betas: tuple[float, float] = Field((0.9, 0.999), description="Adam/AdamW betas (each in [0, 1)).")

    @field_validator("betas")
    @classmethod
    def _betas_in_range(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= beta < 1.0 for beta in value):
            raise ValueError(f"each beta must be in [0, 1), got {list(value)}")
        return value


class SgdParams(Params):
    """Parameters of the optimizer ``sgd``."""

    momentum: float = Field(0.9, ge=0, description="SGD momentum.")
    nesterov: bool = Field(False, description="SGD Nesterov momentum (needs momentum > 0).")

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> SgdParams:
        if self.nesterov and self.momentum <= 0:
            raise ValueError("nesterov = true needs momentum > 0")
        return self


def build_adam(params: AdamParams, ctx: BuildContext) -> Any:
    """``torch.optim.Adam`` over the engine's parameter groups."""
    import torch

    return torch.optim.Adam(ctx.require("param_groups"), betas=params.betas)


def build_adamw(params: AdamParams, ctx: BuildContext) -> Any:
    """``torch.optim.AdamW`` over the engine's parameter groups (decoupled weight decay)."""
    import torch

    return torch.optim.AdamW(ctx.require("param_groups"), betas=params.betas)


def build_sgd(params: SgdParams, ctx: BuildContext) -> Any:
    """``torch.optim.SGD`` over the engine's parameter groups."""
    import torch

    return torch.optim.SGD(ctx.require("param_groups"), momentum=params.momentum, nesterov=params.nesterov)


@hookimpl
def register_optimizers(register: Any) -> None:
    """Register the built-in optimizers."""
    register("adam", build_adam, params=AdamParams, description="Adam (torch.optim.Adam).")
    register("adamw", build_adamw, params=AdamParams, description="AdamW, decoupled weight decay (torch.optim.AdamW).")
    register("sgd", build_sgd, params=SgdParams, description="SGD with momentum (torch.optim.SGD).")


# --------------------------------------------------------------------------------------------------- schedules


class StepParams(Params):
    """Parameters of the schedule ``step``."""

    step_size: int = Field(30, ge=1, description="Epochs between decays.")
    gamma: float = Field(0.1, gt=0, description="Decay factor.")


class MultiStepParams(Params):
    """Parameters of the schedule ``multistep``."""

    milestones: list[int] = Field(default_factory=list, description="Epochs at which to decay.")
    gamma: float = Field(0.1, gt=0, description="Decay factor.")


class CosineParams(Params):
    """Parameters of the schedule ``cosine``."""

    warmup_epochs: int = Field(0, ge=0, description="Linear warm-up epochs: lr · (e + 1) / (warmup_epochs + 1).")
    min_lr: float = Field(0.0, ge=0, description="Lower bound the cosine decays to.")


class PlateauParams(Params):
    """Parameters of the schedule ``plateau``."""

    gamma: float = Field(0.1, gt=0, lt=1, description="Decay factor.")
    patience: int = Field(5, ge=0, description="Evaluations without improvement before decaying.")
    min_lr: float = Field(0.0, ge=0, description="Lower bound of the lr.")


def build_none(params: Params, ctx: BuildContext) -> Any:
    """A constant learning rate."""
    from dmlplug_builtins.optim.schedules import ConstantSchedule

    return ConstantSchedule()


def build_step(params: StepParams, ctx: BuildContext) -> Any:
    """Decay by ``gamma`` every ``step_size`` epochs."""
    import torch

    from dmlplug_builtins.optim.schedules import EpochSchedule

    return EpochSchedule(torch.optim.lr_scheduler.StepLR(ctx.require("optimizer"), params.step_size, params.gamma))


def build_multistep(params: MultiStepParams, ctx: BuildContext) -> Any:
    """Decay by ``gamma`` at each milestone epoch."""
    import torch

    from dmlplug_builtins.optim.schedules import EpochSchedule

    return EpochSchedule(
        torch.optim.lr_scheduler.MultiStepLR(ctx.require("optimizer"), params.milestones, params.gamma))


def build_cosine(params: CosineParams, ctx: BuildContext) -> Any:
    """Linear warm-up, then a cosine decay from each group's lr to ``min_lr`` over the remaining epochs."""
    from dmlplug_builtins.optim.schedules import cosine_schedule

    return cosine_schedule(ctx.require("optimizer"), epochs=ctx.require("epochs"),
                           warmup_epochs=params.warmup_epochs, min_lr=params.min_lr)


def build_plateau(params: PlateauParams, ctx: BuildContext) -> Any:
    """Decay by ``gamma`` when the selection metric has not improved for ``patience`` evaluations."""
    from dmlplug_builtins.optim.schedules import PlateauSchedule, SignedPlateau

    # The engine hands the metric signed so that larger is better ([evaluation] mode = "min" negated).
    return PlateauSchedule(SignedPlateau(ctx.require("optimizer"), mode="max", factor=params.gamma,
                                         patience=params.patience, min_lr=params.min_lr))


@hookimpl
def register_lr_schedules(register: Any) -> None:
    """Register the built-in learning-rate schedules."""
    register("none", build_none, description="Constant learning rate.")
    register("step", build_step, params=StepParams, description="Decay by gamma every step_size epochs (StepLR).")
    register("multistep", build_multistep, params=MultiStepParams,
             description="Decay by gamma at each milestone epoch (MultiStepLR).")
    register("cosine", build_cosine, params=CosineParams,
             description="Linear warm-up, then cosine decay to min_lr over the run's epochs.")
    # It follows the selection metric: a run that selects the last epoch has none to give it, and the test
    # split's metric drives it only when the recipe selects on test explicitly ("selection_metric", issue #41).
    register("plateau", build_plateau, params=PlateauParams, requires=("selection_metric",),
             description="Decay by gamma after patience evaluations without improvement of the selection metric.")
