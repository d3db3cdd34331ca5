"""Model selection: which split selects ``best.pt``, which split reports, and the best evaluation so far.

``[evaluation] select_on`` names the split whose evaluations choose the best checkpoint (``auto``: ``val`` when
the dataset has a validation split, else ``test``) and ``report_on`` the split whose numbers the run reports
(``results.json`` ``metrics``, ``best_metrics``, ``initial_metrics``). :class:`SplitRoles` is that choice made
for a built dataset; :class:`BestTracker` follows the selection with the rules of
:mod:`dmlplug.evaluation.best`, the one definition of "best" that every reader of a run directory uses too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dmlplug.errors import RecipeError, RunError
from dmlplug.evaluation.best import improves, is_candidate


@dataclass(frozen=True)
class SplitRoles:
    """The splits of one run: the one that selects, the one that reports, and when the latter is evaluated.

    Attributes:
        select: The split whose evaluations select ``best.pt``.
        report: The split whose metrics the run reports.
        report_curve: Whether the report split is evaluated at every evaluation (else: before training, after
            the last epoch and, at the end, for the selected checkpoint).
    """

    select: str
    report: str
    report_curve: bool = False

    @property
    def separate(self) -> bool:
        """Whether selection and reporting use different splits (the report split never selects)."""
        return self.select != self.report

    def report_due(self, epoch: int, last_epoch: int, initial: bool) -> bool:
        """Whether an evaluation after ``epoch`` evaluates the report split besides the selection split."""
        return self.separate and (initial or self.report_curve or epoch == last_epoch)


def needs_validation_split(evaluation: Any) -> bool:
    """Whether the ``[evaluation]`` options name the validation split explicitly (``auto`` never requires it)."""
    return "val" in (evaluation.select_on, evaluation.report_on)


def resolve_splits(evaluation: Any, *, has_val: bool, dataset: str = "?") -> SplitRoles:
    """The :class:`SplitRoles` of a run whose dataset has (``has_val``) or lacks a validation split.

    Raises:
        RunError: The options name the validation split and the built dataset has none (``dmlplug validate``
            refuses this already when the dataset's parameters tell, see :func:`check_declared_splits`).
    """
    if needs_validation_split(evaluation) and not has_val:
        keys = " and ".join(f'{key} = "val"' for key in ("select_on", "report_on") if getattr(evaluation, key) == "val")
        raise RunError(f"[evaluation] {keys}, but dataset {dataset!r} has no validation split",
                       where="[evaluation] select_on / report_on",
                       fix='use select_on = "auto" (val when there is one, else test) and report_on = "test", or '
                           "give the dataset validation classes (val_classes in [data.dataset], 'val' rows in a "
                           "CSV list, or [data] val_classes)")
    select = evaluation.select_on if evaluation.select_on != "auto" else ("val" if has_val else "test")
    return SplitRoles(select, evaluation.report_on, bool(evaluation.report_curve))


def evaluated_splits(evaluation: Any, has_val: bool | None) -> tuple[str, ...]:
    """Every split a run evaluates: the report split and the selection split (``has_val``: ``None`` = unknown).

    For checks made before or while the dataset is built (``dmlplug validate``, the run's early checks). With
    ``select_on = "auto"`` and ``has_val`` unknown, both candidates of the selection split are included.
    """
    splits = {evaluation.report_on}
    if evaluation.select_on != "auto":
        splits.add(evaluation.select_on)
    else:
        splits |= {"val"} if has_val else {"test"} if has_val is False else {"val", "test"}
    return tuple(split for split in ("test", "val") if split in splits)


def check_declared_splits(evaluation: Any, has_validation_split: bool | None, dataset: str, where: str) -> None:
    """``dmlplug validate``: refuse ``select_on``/``report_on = "val"`` for a dataset that declares no val split.

    Args:
        evaluation: The recipe's ``[evaluation]`` section.
        has_validation_split: What the dataset's parameters declare (``Params.has_validation_split()``, or the
            recipe's ``[data] val_classes``); ``None``: the data decides, checked when the run builds it.
        dataset: The dataset's name, for the message.
        where: The recipe's name, for the message.

    Raises:
        RecipeError: The dataset declares no validation split and the options name it.
    """
    if has_validation_split is not False or not needs_validation_split(evaluation):
        return
    keys = [f'{key} = "val"' for key in ("select_on", "report_on") if getattr(evaluation, key) == "val"]
    raise RecipeError(
        f"[evaluation] {' and '.join(keys)}, but dataset {dataset!r} (with these parameters) has no validation split",
        where=f"{where}: [evaluation]",
        fix='use select_on = "auto" (val when there is one, else test) and report_on = "test", or give the dataset '
            "validation classes (its val_classes or val_fraction parameter, or [data] val_classes with "
            "train_classes/test_classes)",
    )


class BestTracker:
    """The best evaluation so far on the selection split, and the report split's latest and selected metrics.

    Args:
        metric: The selection metric (``[evaluation] metric``).
        mode: ``"max"`` or ``"min"`` (``[evaluation] mode``).
        select_initial: Whether the untrained model (epoch 0) is a candidate (``[evaluation] select_initial``).

    Attributes:
        value: The best selection value so far (``None`` before the first candidate evaluation).
        epoch: The epoch of that evaluation.
        step: The optimizer step of that evaluation.
        metrics: Every metric of that evaluation, on the selection split.
        reported: The report split's metrics of the selected checkpoint; ``None`` until they are known (when
            the report split was not evaluated at the selected epoch, the end of the run evaluates ``best.pt``).
        latest_report: The report split's latest metrics (the final model's, once the run completed).
        latest_report_epoch: The epoch of :attr:`latest_report`.
    """

    def __init__(self, metric: str, mode: str, select_initial: bool = False):
        self.metric = metric
        self.mode = mode
        self.select_initial = select_initial
        self.value: float | None = None
        self.epoch: int | None = None
        self.step: int | None = None
        self.metrics: dict[str, float] = {}
        self.reported: dict[str, float] | None = None
        self.latest_report: dict[str, float] = {}
        self.latest_report_epoch: int | None = None

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
        """Whether ``value`` beats the best so far (:func:`dmlplug.evaluation.best.improves`)."""
        return improves(value, self.value, self.mode)

    def update(self, metrics: dict[str, float], epoch: int, *, step: int | None = None,
               reported: dict[str, float] | None = None) -> bool:
        """Select ``metrics`` (selection split) of ``epoch`` when it is a candidate and the best so far.

        Args:
            metrics: The selection split's metrics.
            epoch: The evaluated epoch (0 = untrained, a candidate only with ``select_initial``).
            step: The optimizer step of the evaluation.
            reported: The report split's metrics of the same weights, when evaluated at the same time.

        Returns:
            Whether they were selected (``best.pt`` is due).
        """
        value = self.selection_value(metrics)  # also for a baseline: a missing metric is an error at once
        if not is_candidate(epoch, self.select_initial) or not self.is_better(value):
            return False
        self.value, self.epoch, self.step, self.metrics = value, epoch, step, dict(metrics)
        self.reported = dict(reported) if reported is not None else None
        return True

    def record_report(self, metrics: dict[str, float], epoch: int) -> None:
        """Note an evaluation of the report split (the latest one is the run's final ``metrics``)."""
        self.latest_report, self.latest_report_epoch = dict(metrics), epoch

    def state(self) -> dict[str, Any]:
        """The checkpointed form (``best`` in a checkpoint)."""
        return {"value": self.value, "epoch": self.epoch, "step": self.step, "metrics": self.metrics,
                "reported": self.reported, "latest_report": self.latest_report,
                "latest_report_epoch": self.latest_report_epoch}

    def load(self, state: dict[str, Any] | None) -> None:
        """Restore :meth:`state` (keys missing in older checkpoints: nothing selected or reported).

        A selection the current rules do not allow (the untrained model, selected by an older dmlplug or
        before ``select_initial`` was turned off with ``--force``) is dropped: the next candidate is selected.
        """
        state = state or {}
        self.value, self.epoch, self.step = state.get("value"), state.get("epoch"), state.get("step")
        self.metrics = dict(state.get("metrics") or {})
        reported = state.get("reported")
        self.reported = dict(reported) if reported is not None else None
        self.latest_report = dict(state.get("latest_report") or {})
        self.latest_report_epoch = state.get("latest_report_epoch")
        if self.epoch is not None and not is_candidate(int(self.epoch), self.select_initial):
            self.value = self.epoch = self.step = self.reported = None
            self.metrics = {}
