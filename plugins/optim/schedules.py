"""The learning-rate schedule objects of the built-in schedules: torch schedulers behind the engine's protocol.

Every class satisfies :class:`dmlplug.protocols.LRSchedule`: the engine calls ``step_epoch(metric)`` once after
every epoch (``metric``: the epoch's selection metric, signed so that larger is better, or ``None`` when the
epoch was not evaluated) and checkpoints ``state_dict()``. The state of a wrapped torch scheduler is its own
``state_dict()``, so checkpoints hold exactly what torch writes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch


class ConstantSchedule:
    """No schedule: the learning rates stay as the optimizer was built."""

    def step_epoch(self, metric: float | None) -> None:
        """Nothing to do."""

    def state_dict(self) -> dict[str, Any]:
        """No state."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """No state to restore."""


class EpochSchedule:
    """A torch scheduler stepped once per epoch, whatever the metric (``StepLR``, ``MultiStepLR``, ``LambdaLR``).

    Attributes:
        scheduler: The wrapped ``torch.optim.lr_scheduler.LRScheduler``.
    """

    def __init__(self, scheduler: Any):
        self.scheduler = scheduler

    def step_epoch(self, metric: float | None) -> None:
        """Advance the torch scheduler by one epoch."""
        self.scheduler.step()

    def state_dict(self) -> dict[str, Any]:
        """The torch scheduler's state."""
        return dict(self.scheduler.state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the torch scheduler's state."""
        self.scheduler.load_state_dict(state_dict)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.scheduler).__name__})"


class SignedPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """``ReduceLROnPlateau`` whose relative threshold also holds for negative metrics (mode ``"max"``).

    The engine negates a metric that is better when smaller, so the metric may be negative. torch's test of an
    improvement in mode ``"max"``, ``a > best · (1 + threshold)``, then accepts a value slightly worse than the
    best (``best = -1``: any ``a > -1.0001``), and the schedule would never decay; ``a > best + |best| ·
    threshold`` is the same test for positive metrics and the intended one for negative metrics.
    """

    def _is_better(self, a: float, best: float) -> bool:
        if self.mode == "max" and self.threshold_mode == "rel" and math.isfinite(best):
            return bool(a > best + abs(best) * self.threshold)
        return bool(super()._is_better(a, best))


class PlateauSchedule(EpochSchedule):
    """A plateau scheduler (:class:`SignedPlateau`): stepped with the selection metric, only after an evaluation."""

    def step_epoch(self, metric: float | None) -> None:
        """Record ``metric``; an epoch without evaluation (``None``) does not count towards the patience."""
        if metric is not None:
            self.scheduler.step(metric)


def cosine_factor(epoch: int, base: float, *, warmup: int, total: int, min_lr: float) -> float:
    """The multiplier of a group's base lr ``base`` at ``epoch`` (0-based).

    ``(epoch + 1) / (warmup + 1)`` during the warm-up, then ``f + (1 - f) · (1 + cos(π · p)) / 2`` with
    ``f = min_lr / base`` and ``p = (epoch - warmup) / max(total - warmup, 1)`` clipped to 1.
    """
    if epoch < warmup:
        return (epoch + 1) / (warmup + 1)
    progress = (epoch - warmup) / max(total - warmup, 1)
    floor = min_lr / base if base > 0 else 0.0
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def cosine_schedule(optimizer: Any, *, epochs: int, warmup_epochs: int, min_lr: float) -> EpochSchedule:
    """A ``LambdaLR`` with one :func:`cosine_factor` per parameter group (each group decays from its own lr)."""
    base_lrs = [group["lr"] for group in optimizer.param_groups]
    warmup, total = warmup_epochs, max(epochs, 1)

    def factor_of(base: float) -> Callable[[int], float]:
        # A plain function (not a partial or an object): LambdaLR checkpoints no state for it, as it always did.
        def factor(epoch: int) -> float:
            return cosine_factor(epoch, base, warmup=warmup, total=total, min_lr=min_lr)

        return factor

    return EpochSchedule(torch.optim.lr_scheduler.LambdaLR(optimizer, [factor_of(b) for b in base_lrs]))
