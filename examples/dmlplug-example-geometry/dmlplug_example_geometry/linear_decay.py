"""The linear-decay learning-rate schedule: an :class:`dmlplug.protocols.LRSchedule` written from scratch.

Epochs are counted from 0 here (epoch ``e`` is the run's epoch ``e + 1``). During epoch ``e`` every parameter
group trains at ``lr · factor(e)``, where ``lr`` is the group's learning rate when the schedule is built (the
recipe's ``[optimizer] lr`` with group overrides applied) and, with ``W`` warm-up epochs out of ``E``:

* ``factor(e) = (e + 1) / (W + 1)`` for ``e < W`` (linear warm-up, as the built-in ``cosine``);
* ``factor(e) = 1 − (1 − f) · min((e − W) / max(E − 1 − W, 1), 1)`` after it,

so the first epoch after the warm-up trains at ``lr`` and the last one at ``f · lr`` (``f``: ``final_fraction``).
The engine calls :meth:`LinearDecay.step_epoch` once after every epoch; the schedule ignores the metric.
"""

from __future__ import annotations

from typing import Any


def linear_factor(epoch: int, *, epochs: int, warmup_epochs: int, final_fraction: float) -> float:
    """The multiplier of each group's base learning rate during 0-based ``epoch`` (see the module docstring)."""
    if epoch < warmup_epochs:
        return (epoch + 1) / (warmup_epochs + 1)
    progress = min((epoch - warmup_epochs) / max(epochs - 1 - warmup_epochs, 1), 1.0)
    return 1.0 - (1.0 - final_fraction) * progress


class LinearDecay:
    """Sets the learning rate of every group of ``optimizer`` to ``base lr · linear_factor(epoch)``.

    Building it sets the rates of epoch 0; each :meth:`step_epoch` moves to the next epoch.

    Args:
        optimizer: The ``torch.optim.Optimizer`` whose groups it drives.
        epochs: Number of training epochs E.
        warmup_epochs: Warm-up epochs W.
        final_fraction: Fraction f of each group's learning rate reached at the last epoch.

    Attributes:
        epoch: The current 0-based epoch.
        base_lrs: Each group's learning rate when the schedule was built, in group order.
    """

    def __init__(self, optimizer: Any, *, epochs: int, warmup_epochs: int = 0, final_fraction: float = 0.1):
        self.optimizer = optimizer
        self.epochs, self.warmup_epochs, self.final_fraction = epochs, warmup_epochs, final_fraction
        self.base_lrs: list[float] = [float(group["lr"]) for group in optimizer.param_groups]
        self.epoch = 0
        self._apply()

    def factor(self, epoch: int) -> float:
        """The multiplier of the base learning rates during ``epoch``."""
        return linear_factor(epoch, epochs=self.epochs, warmup_epochs=self.warmup_epochs,
                             final_fraction=self.final_fraction)

    def learning_rates(self) -> list[float]:
        """The learning rate of each group during the current epoch."""
        return [base * self.factor(self.epoch) for base in self.base_lrs]

    def step_epoch(self, metric: float | None) -> None:
        """Move to the next epoch (``metric``, the epoch's selection metric, is not used)."""
        self.epoch += 1
        self._apply()

    def state_dict(self) -> dict[str, Any]:
        """The epoch reached and the base learning rates (the settings come from the recipe)."""
        return {"epoch": self.epoch, "base_lrs": list(self.base_lrs)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a checkpoint: restore the epoch and base rates, and set the rates of that epoch."""
        self.epoch = int(state_dict["epoch"])
        self.base_lrs = [float(lr) for lr in state_dict["base_lrs"]]
        self._apply()

    def _apply(self) -> None:
        for group, lr in zip(self.optimizer.param_groups, self.learning_rates(), strict=True):
            group["lr"] = lr

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(epochs={self.epochs}, warmup_epochs={self.warmup_epochs}, "
                f"final_fraction={self.final_fraction}, epoch={self.epoch})")
