"""The values a tracker logger (``mlflow``, ``wandb``) logs at a step, named as TensorBoard's tags.

Both trackers log the same rows: ``train/loss/<term>`` every ``run.log_every`` steps, ``eval/<split>/<metric>``
(bookkeeping counts as ``eval/<split>/counts/<name>``) at every evaluation, and ``epoch`` once per step, as the
``tensorboard`` logger's ``epoch`` scalar.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Evaluation values that count items rather than measure the model: TensorBoard puts them in the text record
#: ``eval/<split>/counts`` and the hyper-parameters, the trackers log them as ``eval/<split>/counts/<name>``.
BOOKKEEPING = frozenset({"excluded_queries"})


#: The trackers' tag (mlflow) and config key (wandb), and TensorBoard's hyper-parameter, naming what selects
#: ``best.pt``: ``"val"``, ``"last"``, or ``"test"`` (only when the recipe says ``select_on = "test"``).
SELECTED_ON_KEY = "dmlplug.selected_on"


def selection_text(selected_on: str) -> str:
    """What selects ``best.pt``, in words: loud for the test split, whose best numbers are then optimistic."""
    if selected_on == "test":
        return ('best.pt is selected on the TEST split (select_on = "test" in the recipe): its best numbers are '
                "chosen by the test classes, so they are optimistic")
    if selected_on == "last":
        return "best.pt is the last epoch's model: no split selects it"
    return f"best.pt is selected on the {'validation' if selected_on == 'val' else selected_on} split"


def loss_values(losses: Mapping[str, Any]) -> dict[str, float]:
    """``train/loss/<term>`` of one step's loss terms."""
    return {f"train/loss/{name}": float(value) for name, value in losses.items()}


def eval_values(split: str, metrics: Mapping[str, Any]) -> dict[str, float | int]:
    """``eval/<split>/<metric>`` and ``eval/<split>/counts/<name>`` of one evaluation's numeric values."""
    return {f"eval/{split}/counts/{name}" if name in BOOKKEEPING else f"eval/{split}/{name}": value
            for name, value in metrics.items() if isinstance(value, float | int)}


class EpochOnce:
    """``{"epoch": epoch}`` the first time a step asks for it, else nothing (one ``epoch`` point per step)."""

    def __init__(self) -> None:
        self._logged: tuple[int, int] | None = None  # (step, epoch) of the last ``epoch`` value

    def __call__(self, step: int, epoch: int) -> dict[str, int]:
        """The ``epoch`` value to log with ``step``'s row, if it was not logged at that step yet."""
        if self._logged == (step, epoch):
            return {}
        self._logged = (step, epoch)
        return {"epoch": epoch}
