"""Best-checkpoint selection: which evaluation is the best so far, by the recipe's ``[evaluation] metric``."""

from __future__ import annotations

from typing import Any

from dmlplug.errors import RunError


class BestTracker:
    """Tracks the best evaluation by one metric, maximised or minimised.

    Args:
        metric: The selection metric (``[evaluation] metric``).
        mode: ``"max"`` or ``"min"`` (``[evaluation] mode``).

    Attributes:
        value: The best selection value so far (``None`` before the first evaluation).
        epoch: The epoch of that evaluation.
        metrics: Every metric of that evaluation.
    """

    def __init__(self, metric: str, mode: str):
        self.metric = metric
        self.mode = mode
        self.value: float | None = None
        self.epoch: int | None = None
        self.metrics: dict[str, float] = {}

    def selection_value(self, metrics: dict[str, float]) -> float:
        """The selection metric's value in ``metrics``.

        Raises:
            RunError: The evaluators do not produce the selection metric.
        """
        if self.metric not in metrics:
            raise RunError(
                f"evaluation.metric {self.metric!r} is not produced by the recipe's evaluators",
                where="[evaluation] metric",
                fix="choose one of: " + ", ".join(sorted(metrics)),
            )
        return float(metrics[self.metric])

    def is_better(self, value: float) -> bool:
        """Whether ``value`` beats the best so far (always true for the first one)."""
        if self.value is None:
            return True
        return value > self.value if self.mode == "max" else value < self.value

    def update(self, metrics: dict[str, float], epoch: int) -> bool:
        """Record ``metrics`` of ``epoch`` when they are the best so far; returns whether they were."""
        value = self.selection_value(metrics)
        if not self.is_better(value):
            return False
        self.value, self.epoch, self.metrics = value, epoch, dict(metrics)
        return True

    def state(self) -> dict[str, Any]:
        """The checkpointed form (``best`` in a checkpoint)."""
        return {"value": self.value, "epoch": self.epoch, "metrics": self.metrics}

    def load(self, state: dict[str, Any] | None) -> None:
        """Restore :meth:`state` (missing in checkpoints that predate selection: nothing selected)."""
        state = state or {}
        self.value, self.epoch = state.get("value"), state.get("epoch")
        self.metrics = dict(state.get("metrics") or {})
