"""Which evaluation of a run is its "best": the one definition the engine selects by and every reader reads.

The engine picks ``checkpoints/best.pt`` with :func:`is_candidate` and :func:`improves` (on the selection split,
``[evaluation] select_on``) and writes the result to ``results.json``; ``dmlplug report``, ``dmlplug oodml
summarize --reduce best`` and ``dmlplug export`` read it back with :func:`read_best`, so they never disagree
about a run. The rules:

* the evaluation of the untrained model (epoch 0) is a baseline, not a candidate, unless the recipe says
  ``[evaluation] select_initial = true``;
* among the candidates, the first evaluation with the best value of ``[evaluation] metric`` (``mode`` max or
  min) wins: a later tie does not replace it;
* the reported values are those of the selected checkpoint on the report split (``[evaluation] report_on``);
* ``select_on = "last"`` (and ``auto`` without a validation split) selects by no evaluation: the latest evaluated
  model is the selection, the last epoch's once the run completed; ``selected_on`` is then :data:`LAST`.

Run directories written before these rules (their ``results.json`` has no ``selected_on``) may name the untrained
model as best; :func:`read_best` then selects again from their ``metrics.jsonl``, by the same rules. Nothing here
imports torch.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmlplug.errors import DataError

#: ``selected_on`` of a run whose ``best.pt`` is its last evaluated model, chosen by no evaluation.
LAST = "last"

#: Keys of a ``metrics.jsonl`` record that are not metrics.
RECORD_KEYS = frozenset({"epoch", "step", "split", "time", "report"})


def is_candidate(epoch: int, select_initial: bool = False) -> bool:
    """Whether the evaluation after ``epoch`` may be selected (epoch 0, the untrained model, only on request)."""
    return epoch > 0 or select_initial


def improves(value: float, best: float | None, mode: str = "max") -> bool:
    """Whether ``value`` beats ``best`` (``None``: nothing selected yet); a tie does not, nor does NaN."""
    if math.isnan(value):
        return False
    if best is None:
        return True
    return value > best if mode == "max" else value < best


@dataclass(frozen=True)
class BestResult:
    """The selected evaluation of a run, as every command reads it.

    Attributes:
        epoch: Epoch of the selected checkpoint; ``None`` when nothing was selected (no candidate evaluation).
        metrics: Its metrics on :attr:`reported_on` (empty when nothing was selected, or when the run stopped
            before the report split was evaluated for it).
        selected_on: The split whose evaluations selected it (``"val"`` or ``"test"``), or :data:`LAST` (the last
            evaluated model, chosen by no evaluation).
        reported_on: The split :attr:`metrics` were computed on.
        checkpoint: The checkpoint file that holds its weights, or ``None`` when none does.
        note: Why the result differs from what ``results.json`` records (older run directories), else ``None``.
    """

    epoch: int | None
    metrics: dict[str, float] = field(default_factory=dict)
    selected_on: str = "test"
    reported_on: str = "test"
    checkpoint: Path | None = None
    note: str | None = None

    @property
    def on_test(self) -> bool:
        """Whether the test split selected it (its numbers are then optimistic, and labelled so everywhere)."""
        return self.selected_on == "test"

    def selection_label(self) -> str:
        """How it was chosen, as commands show it: ``"selected on val"``, ``"selected on TEST"``, ``"last epoch"``."""
        if self.selected_on == LAST:
            return "last epoch"
        return "selected on TEST" if self.on_test else f"selected on {self.selected_on}"


def metrics_of(record: Mapping[str, Any]) -> dict[str, float]:
    """The numeric metrics of a ``metrics.jsonl`` record or a results dict (bookkeeping keys left out)."""
    return {k: float(v) for k, v in record.items()
            if k not in RECORD_KEYS and isinstance(v, int | float) and not isinstance(v, bool)}


def read_records(directory: Path) -> list[dict[str, Any]]:
    """The records of ``metrics.jsonl`` (a line cut by an interrupted write ends the log); none without it."""
    path = Path(directory) / "metrics.jsonl"
    records: list[dict[str, Any]] = []
    if not path.is_file():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return records


def select(records: Iterable[Mapping[str, Any]], *, split: str, metric: str, mode: str = "max",
           select_initial: bool = False) -> Mapping[str, Any] | None:
    """The record :func:`is_candidate` and :func:`improves` select among ``records`` of ``split``, or ``None``.

    Records written by the end-of-run report (``"report"`` key) are re-evaluations, never candidates.
    """
    best: Mapping[str, Any] | None = None
    value: float | None = None
    for record in records:
        candidate = record.get(metric)
        if (record.get("split") != split or "report" in record or not isinstance(candidate, int | float)
                or not is_candidate(int(record.get("epoch", 0)), select_initial)):
            continue
        if improves(float(candidate), value, mode):
            best, value = record, float(candidate)
    return best


def read_best(directory: str | Path, *, results: Mapping[str, Any] | None = None,
              recipe: Mapping[str, Any] | None = None) -> BestResult:
    """The selected evaluation of the run in ``directory`` (see the module docstring).

    Args:
        directory: A run directory written by ``dmlplug run``.
        results: Its ``results.json``, when already read.
        recipe: Its ``recipe.resolved.toml``, when already read (read only for older run directories).

    Raises:
        DataError: ``results.json`` (or, for an older run, an existing ``recipe.resolved.toml``) cannot be read.
    """
    directory = Path(directory)
    results = results if results is not None else _read_json(directory / "results.json")
    checkpoints = directory / "checkpoints"
    if "selected_on" in results:
        epoch = results.get("best_epoch")
        best_pt = checkpoints / "best.pt"
        return BestResult(epoch, metrics_of(results.get("best_metrics") or {}), str(results["selected_on"]),
                          str(results.get("reported_on") or results["selected_on"]),
                          best_pt if epoch is not None and best_pt.is_file() else None)
    return _read_older(directory, results, recipe)


def _read_older(directory: Path, results: Mapping[str, Any], recipe: Mapping[str, Any] | None) -> BestResult:
    # An older run selected and reported on [evaluation] split alone, and its untrained model could be best.
    # Without its recipe (a copied results.json), that split is the default, test, selected by recall@1.
    path = directory / "recipe.resolved.toml"
    if recipe is None:
        recipe = _read_toml(path) if path.is_file() else {}
    evaluation = recipe.get("evaluation") or {}
    split = str(evaluation.get("split", "test"))
    recorded, best_pt = results.get("best_epoch"), directory / "checkpoints" / "best.pt"
    if recorded is None or int(recorded) > 0:
        return BestResult(recorded, metrics_of(results.get("best_metrics") or {}), split, split,
                          best_pt if recorded is not None and best_pt.is_file() else None)
    chosen = select(read_records(directory), split=split, metric=str(evaluation.get("metric", "recall@1")),
                    mode=str(evaluation.get("mode", "max")))
    note = "results.json names the untrained model (epoch 0) as best (written by an older dmlplug); "
    if chosen is None:
        return BestResult(None, {}, split, split, None, note + "no trained evaluation to select instead")
    epoch = int(chosen["epoch"])
    # best.pt holds the untrained weights; last.pt holds the selected ones only when they are the last epoch's.
    last = directory / "checkpoints" / "last.pt"
    holds = last if epoch == results.get("epochs_completed") and last.is_file() else None
    return BestResult(epoch, metrics_of(chosen), split, split, holds,
                      note + f"selected again among the trained evaluations: epoch {epoch}")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read {path.name}: {exc}", where=str(path.parent),
                        fix="give the directory of a run written by `dmlplug run`") from None
    if not isinstance(value, dict):
        raise DataError(f"{path.name} does not hold a JSON object", where=str(path),
                        fix="give the directory of a run written by `dmlplug run`")
    return value


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise DataError(f"cannot read {path.name}: {exc}", where=str(path.parent),
                        fix="a run directory written by `dmlplug run` has it") from None
