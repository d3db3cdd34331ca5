"""Model selection: which split selects ``best.pt``, which split reports, and the best evaluation so far.

``[evaluation] select_on`` names the split whose evaluations choose the best checkpoint, or ``last`` (the last
epoch's model, chosen by no evaluation); ``auto`` is ``val`` when the dataset has a validation split, else
``last``. Nothing selects on the test split unless the recipe says ``select_on = "test"`` in so many words
(Musgrave et al., "A Metric Learning Reality Check", 2020: selecting on the test classes inflates the reported
numbers), and every place that shows such a number says so. ``report_on`` names the split whose numbers the run
reports (``results.json`` ``metrics``, ``best_metrics``, ``initial_metrics``). :class:`SplitRoles` is that choice
made for a built dataset, :func:`describe_selection` says it in words (``dmlplug validate``, the run's start);
:class:`BestTracker` follows the selection with the rules of :mod:`dmlplug.evaluation.best`, the one definition of
"best" that every reader of a run directory uses too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dmlplug.errors import RecipeError, RunError
from dmlplug.evaluation.best import LAST, improves, is_candidate


def validation_how(parameter: str | None = None) -> str:
    """How to give a dataset validation classes carved from its training classes (class-disjoint), for messages.

    Args:
        parameter: The dataset's parameter that does it (``Params.validation_parameter()``), when it has one.
    """
    if parameter:
        return (f"carve validation classes out of the training classes: --set data.dataset.{parameter}=0.25 (a "
                "quarter of them, class-disjoint; docs/recipes.md, \"Which split selects\")")
    return ("give the dataset validation classes carved from its training classes (its validation parameter, "
            "'val' rows in a CSV list, or [data] val_classes with train_classes/test_classes)")


@dataclass(frozen=True)
class SplitRoles:
    """The splits of one run: the one that selects, the one that reports, and when the latter is evaluated.

    Attributes:
        select: The split whose evaluations select ``best.pt`` (``"val"``, ``"test"``), or ``"last"``: the latest
            evaluated model is ``best.pt``, so a completed run's is the last epoch's.
        report: The split whose metrics the run reports.
        report_curve: Whether the report split is evaluated at every evaluation (else: before training, after
            the last epoch and, at the end, for the selected checkpoint). With ``select = "last"`` the report split
            is the one evaluated at every evaluation (its curve; it selects nothing).
    """

    select: str
    report: str
    report_curve: bool = False

    @property
    def evaluated(self) -> str:
        """The split evaluated at every evaluation: the selection split, or the report split for ``"last"``."""
        return self.report if self.select == LAST else self.select

    @property
    def separate(self) -> bool:
        """Whether selection and reporting use different splits (the report split never selects)."""
        return self.evaluated != self.report

    @property
    def on_test(self) -> bool:
        """Whether the test split selects ``best.pt`` (only ever when the recipe says ``select_on = "test"``)."""
        return self.select == "test"

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
                       fix='use select_on = "auto" (val when there is one, else the last epoch) and report_on = '
                           '"test", or give the dataset validation classes (val_classes in [data.dataset], \'val\' '
                           "rows in a CSV list, or [data] val_classes)")
    select = evaluation.select_on if evaluation.select_on != "auto" else ("val" if has_val else LAST)
    return SplitRoles(select, evaluation.report_on, bool(evaluation.report_curve))


def describe_selection(evaluation: Any, has_val: bool | None, dataset: str = "?",
                       parameter: str | None = None) -> str:
    """Which split selects ``best.pt`` and why, in one sentence (``dmlplug validate`` prints it).

    Args:
        evaluation: The recipe's ``[evaluation]`` section.
        has_val: Whether the dataset has a validation split; ``None``: its parameters cannot tell (the data does).
        dataset: The dataset's name, for the sentence.
        parameter: The dataset's parameter that carves validation classes (``Params.validation_parameter()``).
    """
    choice, metric = evaluation.select_on, f"{evaluation.metric} ({evaluation.mode})"
    if choice == "test":
        return (f'the TEST split selects best.pt by {metric}, because the recipe says select_on = "test": its best '
                "numbers are chosen by the test classes (optimistic) and are labelled so; for a test number chosen "
                f'without the test set, {validation_how(parameter)} with select_on = "auto"')
    if choice == "val":
        return f'the validation split selects best.pt by {metric} (select_on = "val")'
    if choice == LAST:
        return 'no split selects: best.pt is the last epoch\'s model (select_on = "last")'
    if has_val:
        return (f'the validation split selects best.pt by {metric} (select_on = "auto", and dataset {dataset!r} '
                "has validation classes)")
    last = (f"best.pt is the last epoch's model (select_on = \"auto\", and dataset {dataset!r} has no validation "
            "classes; the test split selects only when the recipe says select_on = \"test\"); to select on "
            f"validation classes, {validation_how(parameter)}")
    if has_val is None:
        return (f"the validation split selects best.pt by {metric} if dataset {dataset!r} has one (its parameters "
                f"cannot tell), else no split selects: {last}")
    return f"no split selects: {last}"


def check_metric_followers(evaluation: Any, has_val: bool | None, followers: list[str], dataset: str,
                           where: str, error: type[RecipeError] | type[RunError] = RecipeError,
                           parameter: str | None = None) -> None:
    """Refuse components that follow the selection metric (a plateau schedule) when no split selects.

    Such a component (``requires = ("selection_metric",)``) is handed the selection split's metric after every
    evaluation; with ``select_on = "last"`` (or ``auto`` without validation classes) there is none, and the test
    metric is never handed over unless the recipe selects on test explicitly.

    Args:
        evaluation: The recipe's ``[evaluation]`` section.
        has_val: Whether the dataset has a validation split (``None``: unknown, nothing is refused).
        followers: Who follows the metric, for the message (``"lr_schedule 'plateau' ([scheduler])"``).
        dataset: The dataset's name, for the message.
        where: The recipe's name, for the message.
        error: :class:`RecipeError` (``dmlplug validate``) or :class:`RunError` (the run, once the data tells).
        parameter: The dataset's parameter that carves validation classes, for the message.

    Raises:
        RecipeError: (or ``error``) A follower and no selection metric.
    """
    if not followers or has_val is None:
        return
    select = evaluation.select_on if evaluation.select_on != "auto" else ("val" if has_val else LAST)
    if select != LAST:
        return
    why = ('select_on = "last"' if evaluation.select_on == LAST
           else f'select_on = "auto" and dataset {dataset!r} has no validation classes')
    raise error(
        f"{', '.join(followers)} follows the selection metric, but this run selects the last epoch by no "
        f"evaluation ({why}); the test metric drives nothing unless the recipe says so",
        where=f"{where}: [evaluation] select_on",
        fix=f"{validation_how(parameter)}; or say select_on = \"test\" (its numbers are then labelled as "
            "selected on the test split); or choose a schedule that ignores the metric (`dmlplug list lr_schedules`)",
    )


def evaluated_splits(evaluation: Any, has_val: bool | None) -> tuple[str, ...]:
    """Every split a run evaluates: the report split and the selection split (``has_val``: ``None`` = unknown).

    For checks made before or while the dataset is built (``dmlplug validate``, the run's early checks). With
    ``select_on = "auto"`` and ``has_val`` unknown, the validation split is included (it selects when it exists).
    ``"last"`` evaluates the report split only.
    """
    splits = {evaluation.report_on}
    if evaluation.select_on not in ("auto", LAST):
        splits.add(evaluation.select_on)
    elif evaluation.select_on == "auto" and has_val is not False:
        splits.add("val")
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
        fix='use select_on = "auto" (val when there is one, else the last epoch) and report_on = "test", or give the '
            "dataset validation classes (its val_classes or val_fraction parameter, or [data] val_classes with "
            "train_classes/test_classes)",
    )


class BestTracker:
    """The best evaluation so far on the selection split, and the report split's latest and selected metrics.

    Args:
        metric: The selection metric (``[evaluation] metric``).
        mode: ``"max"`` or ``"min"`` (``[evaluation] mode``).
        select_initial: Whether the untrained model (epoch 0) is a candidate (``[evaluation] select_initial``).
        latest: Select every candidate evaluation, whatever its value (``select_on = "last"``): the latest
            evaluated model is the selection, the last epoch's once the run completed.

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

    def __init__(self, metric: str, mode: str, select_initial: bool = False, latest: bool = False):
        self.metric = metric
        self.mode = mode
        self.select_initial = select_initial
        self.latest = latest
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
        """Whether ``value`` beats the best so far (:func:`dmlplug.evaluation.best.improves`); always when latest."""
        return self.latest or improves(value, self.value, self.mode)

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
