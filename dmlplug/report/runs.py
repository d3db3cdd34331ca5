"""Reading run directories for ``dmlplug report``: results, resolved recipe, curves; grouping by recipe.

A run's "best" values are what :func:`dmlplug.evaluation.best.read_best` says (the one definition every command
reads); a group's statistics are over its distinct seeds (:meth:`Group.stat`).
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmlplug.engine.flatten import flatten_recipe
from dmlplug.errors import DataError
from dmlplug.evaluation.best import read_best, read_records
from dmlplug.report.labels import label_keys, shown_value

if TYPE_CHECKING:
    from dmlplug.registry import Registry

#: Recipe keys that do not make two runs different experiments.
_RUN_ONLY = ("seed", "name", "output_dir")

#: ``results.json`` status of a run that trained every epoch; other runs are never averaged with these.
COMPLETED = "completed"


@dataclass
class RunRecord:
    """One run directory as read from disk.

    ``final`` and ``best`` are on the report split (:attr:`reported_on`): the last evaluation of it, and the
    checkpoint selected on :attr:`selected_on` (:func:`dmlplug.evaluation.best.read_best`; :attr:`best_note` says
    why it differs from an older ``results.json``).
    """

    directory: Path
    name: str
    status: str
    seed: int | None
    recipe: dict[str, Any]
    final: dict[str, float]
    best: dict[str, float]
    best_epoch: int | None
    curves: list[dict[str, Any]]
    loss_curve: list[tuple[int, float]] = field(default_factory=list)
    selected_on: str = "test"
    reported_on: str = "test"
    best_note: str | None = None


@dataclass
class Group:
    """Runs that share a recipe up to the seed."""

    label: str
    runs: list[RunRecord]
    key: str

    @property
    def status(self) -> str:
        """The runs' ``results.json`` status (one per group: runs of another status form another group)."""
        return self.runs[0].status if self.runs else COMPLETED

    @property
    def seeds(self) -> list[int | None]:
        """Seeds of the runs (a seed run twice is listed twice)."""
        return [r.seed for r in self.runs]

    @property
    def distinct_seeds(self) -> list[int | None]:
        """The distinct seeds of the runs, in order of first appearance."""
        return list(dict.fromkeys(self.seeds))

    @property
    def repeated_seeds(self) -> dict[int | None, int]:
        """Seeds run more than once, with how many runs each has."""
        return {s: self.seeds.count(s) for s in self.distinct_seeds if self.seeds.count(s) > 1}

    def stat(self, which: str, metric: str) -> tuple[float, float, int]:
        """``(mean, sample std, n)`` of ``final`` or ``best`` values over the distinct seeds that have the metric.

        Runs that repeat a seed are averaged first: they are one sample of the seed, so ``n`` counts seeds and
        the spread is over seeds only (0.0, shown as none, when there is a single seed).
        """
        per_seed: dict[int | None, list[float]] = {}
        for r in self.runs:
            value = getattr(r, which).get(metric)
            if value is not None and math.isfinite(value):
                per_seed.setdefault(r.seed, []).append(value)
        values = [sum(v) / len(v) for v in per_seed.values()]
        if not values:
            return math.nan, math.nan, 0
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
        return mean, std, len(values)

    @property
    def protocol(self) -> str:
        """Which split selected and which reported, ``"val → test"`` (``"val → test / test → test"`` if mixed)."""
        return " / ".join(dict.fromkeys(f"{r.selected_on} → {r.reported_on}" for r in self.runs))



def find_runs(paths: Sequence[str | Path]) -> list[Path]:
    """Run directories: each path that holds ``results.json``, else every run directory below it.

    Raises:
        DataError: A path does not exist or holds no run.
    """
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise DataError(f"{path} does not exist", where="dmlplug report RUN_DIR", fix="give run directories")
        if (path / "results.json").is_file():
            found.append(path)
            continue
        below = sorted(p.parent for p in path.rglob("results.json"))
        if not below:
            raise DataError(f"no run directory (with results.json) in {path}", where="dmlplug report RUN_DIR",
                            fix="give the directory of a finished run, or a folder that contains runs")
        found.extend(below)
    unique: list[Path] = []
    for p in found:
        if p.resolve() not in {u.resolve() for u in unique}:
            unique.append(p)
    return unique


def read_run(directory: Path) -> RunRecord:
    """Read ``results.json``, ``recipe.resolved.toml`` and ``metrics.jsonl`` of one run.

    Raises:
        DataError: ``results.json`` or the recipe cannot be read.
    """
    try:
        results = json.loads((directory / "results.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read results.json: {exc}", where=str(directory)) from None
    try:
        recipe = tomllib.loads((directory / "recipe.resolved.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise DataError(f"cannot read recipe.resolved.toml: {exc}", where=str(directory),
                        fix="a run directory written by `dmlplug run` has it") from None
    run = recipe.get("run", {})
    best = read_best(directory, results=results, recipe=recipe)

    def floats(values: Any) -> dict[str, float]:
        return {k: float(v) for k, v in (values or {}).items() if isinstance(v, int | float)}

    record = RunRecord(directory=directory, name=str(results.get("name") or run.get("name") or directory.name),
                       status=str(results.get("status", "unknown")), seed=run.get("seed"), recipe=recipe,
                       final=floats(results.get("metrics")), best=best.metrics, best_epoch=best.epoch,
                       curves=read_records(directory), selected_on=best.selected_on, reported_on=best.reported_on,
                       best_note=best.note)
    record.loss_curve = _loss_curve(directory / "tb")
    return record


def _loss_curve(tb: Path) -> list[tuple[int, float]]:
    """``train/loss/total`` by step from the run's TensorBoard events (empty without them or tensorboard)."""
    if not tb.is_dir():
        return []
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        return []
    acc = EventAccumulator(str(tb), size_guidance={"scalars": 0, "histograms": 1, "images": 1, "tensors": 1})
    acc.Reload()
    if "train/loss/total" not in acc.Tags().get("scalars", []):
        return []
    return [(int(e.step), float(e.value)) for e in acc.Scalars("train/loss/total")]


def group_runs(runs: Sequence[RunRecord], registry: Registry) -> list[Group]:
    """Group runs whose resolved recipes differ only in ``run.seed`` / ``run.name`` / ``run.output_dir``.

    Only completed runs are averaged together: failed and interrupted runs form groups of their own, marked
    in the label (``exp [interrupted]``), so a report never mixes a half-trained run into a completed mean.
    Groups of the same run name are labelled with the recipe values that tell them apart, in full
    (:func:`dmlplug.report.labels.label_keys`, with defaults from ``registry``), so no two groups read the same.
    """
    groups: dict[str, Group] = {}
    for record in runs:
        recipe = json.loads(json.dumps(record.recipe, default=str))
        for key in _RUN_ONLY:
            recipe.get("run", {}).pop(key, None)
        key = json.dumps(recipe, sort_keys=True)
        if record.status != COMPLETED:
            key += f"\n{record.status}"
        group = groups.setdefault(key, Group(label=record.name, runs=[], key=key))
        group.runs.append(record)
    result = list(groups.values())
    by_name: dict[str, list[Group]] = {}
    for g in result:
        by_name.setdefault(g.label, []).append(g)
    for name, same in by_name.items():
        flats = [flatten_recipe(json.loads(g.key.split("\n")[0])) for g in same]
        for g, flat, keys in zip(same, flats, label_keys(flats, registry), strict=True):
            label = name + (" (" + ", ".join(f"{k}={shown_value(flat.get(k))}" for k in keys) + ")" if keys else "")
            g.label = label + (f" [{g.status}]" if g.status != COMPLETED else "")
    _make_unique(result)
    return sorted(result, key=lambda g: (_natural(g.label), g.label))


def _make_unique(groups: list[Group]) -> None:
    """Number labels that still read the same (values that print alike, e.g. ``1`` and ``"1"``)."""
    seen: dict[str, list[Group]] = {}
    for g in groups:
        seen.setdefault(g.label, []).append(g)
    for label, same in seen.items():
        if len(same) > 1:
            for i, g in enumerate(same, 1):
                g.label = f"{label} #{i}"


def _natural(text: str) -> list[Any]:
    """Sort key that orders numbers by value: ``split_id=2`` before ``split_id=10``."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text)]


def choose_metrics(groups: Sequence[Group], metrics: Sequence[str] | None) -> list[str]:
    """The requested metrics (each must exist in some run) or, by default, those every run reports.

    Raises:
        DataError: A requested metric is in no run.
    """
    runs = [r for g in groups for r in g.runs]
    have = {k for r in runs for k in (*r.final, *r.best)}
    if metrics:
        absent = [m for m in metrics if m not in have]
        if absent:
            raise DataError(f"metric {absent[0]!r} is in no run's results", where="--metric",
                            fix=f"choose among {sorted(have)}")
        return list(metrics)
    common = set.intersection(*(set(r.final) | set(r.best) for r in runs)) if runs else set()
    selection = [r.recipe.get("evaluation", {}).get("metric") for r in runs]
    first = [m for m in dict.fromkeys(selection) if m in common]
    rest = sorted(common - set(first) - {"excluded_queries"})
    return first + rest
