"""``dmlplug report RUN_DIR ...``: compare runs in a Markdown/CSV table with learning curves and metric-vs-FID plots.

Runs are grouped by their resolved recipe with ``run.seed``, ``run.name`` and ``run.output_dir`` left out:
runs of one group differ only in their seed, and their metrics are reported as mean ± sample standard
deviation over seeds. Each group is labelled by its run name, plus the recipe values that tell groups of
the same name apart.

Values:
    * final: ``results.json`` ``metrics`` (the last evaluation);
    * best: ``results.json`` ``best_metrics`` (the evaluation selected by ``evaluation.metric``);
    * learning curves: every evaluation in ``metrics.jsonl`` (mean over the group's seeds per epoch), and the
      training loss ``train/loss/total`` from the runs' TensorBoard events when there are some;
    * FID: when a run's recipe names an ooDML split (``data.split_file`` + ``data.split_id``), the split's
      FID from that file; with two or more distinct FIDs the report adds metric-vs-FID plots (best values)
      and the AGS of each metric (:func:`dmlplug.oodml.ags`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmlplug.errors import DataError

#: Recipe keys that do not make two runs different experiments.
_RUN_ONLY = ("seed", "name", "output_dir")


@dataclass
class RunRecord:
    """One run directory as read from disk."""

    directory: Path
    name: str
    status: str
    seed: int | None
    recipe: dict[str, Any]
    final: dict[str, float]
    best: dict[str, float]
    best_epoch: int | None
    curves: list[dict[str, Any]]
    fid: float | None = None
    loss_curve: list[tuple[int, float]] = field(default_factory=list)
    split_id: int | None = None


@dataclass
class Group:
    """Runs that share a recipe up to the seed."""

    label: str
    runs: list[RunRecord]
    key: str
    fid: float | None = None

    @property
    def seeds(self) -> list[int | None]:
        """Seeds of the runs."""
        return [r.seed for r in self.runs]

    def stat(self, which: str, metric: str) -> tuple[float, float, int]:
        """``(mean, sample std, n)`` of ``final`` or ``best`` values over the runs that have the metric."""
        values = [getattr(r, which)[metric] for r in self.runs if metric in getattr(r, which)]
        values = [v for v in values if math.isfinite(v)]
        if not values:
            return math.nan, math.nan, 0
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
        return mean, std, len(values)


@dataclass
class Report:
    """Groups, the metrics shown, AGS per metric (when FIDs are known) and the files written."""

    groups: list[Group]
    metrics: list[str]
    ags: dict[str, float] = field(default_factory=dict)
    figures: list[Path] = field(default_factory=list)

    def markdown(self, relative_to: Path | None = None) -> str:
        """The report as Markdown (figures linked relative to ``relative_to`` when given)."""
        lines = ["# dmlplug report", ""]
        with_fid = any(g.fid is not None for g in self.groups)
        head = ["run", "seeds"] + (["FID"] if with_fid else [])
        head += [f"final {m}" for m in self.metrics] + [f"best {m}" for m in self.metrics]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for g in self.groups:
            cells = [g.label, str(len(g.runs))]
            if with_fid:
                cells.append(f"{g.fid:.2f}" if g.fid is not None else "–")
            cells += [_cell(g.stat("final", m)) for m in self.metrics]
            cells += [_cell(g.stat("best", m)) for m in self.metrics]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "Values: mean ± sample std over seeds (a single run shows its value). final = last evaluation, "
                      "best = the evaluation selected by `evaluation.metric`.", ""]
        if self.ags:
            lines.append("AGS (area under the metric-vs-normalised-FID curve, best values in %): "
                         + ", ".join(f"{m} {v:.2f}" for m, v in self.ags.items()))
            lines.append("")
        lines += ["## Runs", ""]
        for g in self.groups:
            for r in g.runs:
                where = f"epoch {r.best_epoch}" if r.best_epoch is not None else "–"
                lines.append(f"- {g.label}: `{r.directory}` (seed {r.seed}, {r.status}, best at {where})")
        if self.figures:
            lines += ["", "## Figures", ""]
            for path in self.figures:
                shown = path.relative_to(relative_to) if relative_to is not None else path
                lines.append(f"![{path.stem}]({shown.as_posix()})")
                lines.append("")
        return "\n".join(lines).rstrip() + "\n"

    def csv(self) -> str:
        """One row per group: label, runs, seeds, FID, then mean/std of final and best values per metric."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        header = ["run", "runs", "seeds", "fid"]
        for which in ("final", "best"):
            for m in self.metrics:
                header += [f"{which}/{m}/mean", f"{which}/{m}/std"]
        writer.writerow(header)
        for g in self.groups:
            row: list[Any] = [g.label, len(g.runs), " ".join(str(s) for s in g.seeds),
                              "" if g.fid is None else g.fid]
            for which in ("final", "best"):
                for m in self.metrics:
                    mean, std, _ = g.stat(which, m)
                    row += [_num(mean), _num(std)]
            writer.writerow(row)
        return buffer.getvalue()


def _cell(stat: tuple[float, float, int]) -> str:
    mean, std, n = stat
    if n == 0:
        return "–"
    return f"{mean:.4f}" if n == 1 else f"{mean:.4f} ± {std:.4f}"


def _num(value: float) -> str:
    return "" if math.isnan(value) else repr(float(value))


# ---------------------------------------------------------------------------------------------- reading
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
    curves = []
    log = directory / "metrics.jsonl"
    if log.is_file():
        for line in log.read_text(encoding="utf-8").splitlines():
            if line.strip():
                try:
                    curves.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # a line cut by an interrupted write ends the log
    run = recipe.get("run", {})

    def floats(values: Any) -> dict[str, float]:
        return {k: float(v) for k, v in (values or {}).items() if isinstance(v, int | float)}

    record = RunRecord(directory=directory, name=str(results.get("name") or run.get("name") or directory.name),
                       status=str(results.get("status", "unknown")), seed=run.get("seed"), recipe=recipe,
                       final=floats(results.get("metrics")), best=floats(results.get("best_metrics")),
                       best_epoch=results.get("best_epoch"), curves=curves)
    record.fid, record.split_id = _split_fid(recipe, directory)
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


def _split_fid(recipe: dict[str, Any], directory: Path) -> tuple[float | None, int | None]:
    data = recipe.get("data", {})
    split_file, split_id = data.get("split_file"), data.get("split_id")
    if not split_file or split_id is None:
        return None, None
    from dmlplug.oodml.sweep import load_split_source

    for candidate in (Path(split_file), directory / split_file):
        if candidate.is_file():
            try:
                splits = load_split_source(candidate)
            except DataError:
                return None, int(split_id)
            for split in splits.splits:
                if split.id == int(split_id):
                    return float(split.fid), int(split_id)
    return None, int(split_id)


def _flatten(values: Any, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    if isinstance(values, dict):
        for key, value in values.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
    elif isinstance(values, list) and values and all(isinstance(v, dict) for v in values):
        for i, value in enumerate(values):
            flat.update(_flatten(value, f"{prefix[:-1]}[{i}]."))
    else:
        flat[prefix[:-1]] = values
    return flat


def group_runs(runs: Sequence[RunRecord]) -> list[Group]:
    """Group runs whose resolved recipes differ only in ``run.seed`` / ``run.name`` / ``run.output_dir``."""
    groups: dict[str, Group] = {}
    for record in runs:
        recipe = json.loads(json.dumps(record.recipe, default=str))
        for key in _RUN_ONLY:
            recipe.get("run", {}).pop(key, None)
        key = json.dumps(recipe, sort_keys=True)
        group = groups.setdefault(key, Group(label=record.name, runs=[], key=key, fid=record.fid))
        group.runs.append(record)
    result = list(groups.values())
    by_name: dict[str, list[Group]] = {}
    for g in result:
        by_name.setdefault(g.label, []).append(g)
    for same in by_name.values():
        if len(same) < 2:
            continue
        flats = [_flatten(json.loads(g.key)) for g in same]
        keys = sorted({k for f in flats for k in f if len({json.dumps(x.get(k), default=str) for x in flats}) > 1})
        for g, flat in zip(same, flats, strict=True):
            shown = ", ".join(f"{k}={flat.get(k)}" for k in keys[:3]) + (", …" if len(keys) > 3 else "")
            g.label = f"{g.label} ({shown})"
    return sorted(result, key=lambda g: (g.fid if g.fid is not None else math.inf, g.label))


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


# ---------------------------------------------------------------------------------------------- figures
def _learning_curves(groups: Sequence[Group], metric: str) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    for g in groups:
        per_epoch: dict[int, list[float]] = {}
        for r in g.runs:
            for rec in r.curves:
                value = rec.get(metric)
                if isinstance(value, int | float) and math.isfinite(value):
                    per_epoch.setdefault(int(rec.get("epoch", 0)), []).append(float(value))
        if not per_epoch:
            continue
        epochs = sorted(per_epoch)
        means = [sum(per_epoch[e]) / len(per_epoch[e]) for e in epochs]
        line = ax.plot(epochs, means, marker="o", label=g.label)[0]
        if len(g.runs) > 1:
            lo = [min(per_epoch[e]) for e in epochs]
            hi = [max(per_epoch[e]) for e in epochs]
            ax.fill_between(epochs, lo, hi, color=line.get_color(), alpha=0.15)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch (0 = before training)")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric}: mean over seeds (band: min–max)")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def _loss_curves(groups: Sequence[Group]) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    for g in groups:
        per_step: dict[int, list[float]] = {}
        for r in g.runs:
            for step, value in r.loss_curve:
                if math.isfinite(value):
                    per_step.setdefault(step, []).append(value)
        if per_step:
            steps = sorted(per_step)
            ax.plot(steps, [sum(per_step[s]) / len(per_step[s]) for s in steps], label=g.label)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("train/loss/total")
    ax.set_title("Training loss: mean over seeds")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def _metric_vs_fid(groups: Sequence[Group], metrics: Sequence[str]) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    points = sorted((g for g in groups if g.fid is not None), key=lambda g: g.fid)
    for metric in metrics:
        rows = [(g.fid, *g.stat("best", metric)) for g in points]
        rows = [r for r in rows if r[3] > 0]
        if rows:
            ax.errorbar([r[0] for r in rows], [r[1] for r in rows], yerr=[r[2] for r in rows], marker="o",
                        capsize=3, label=metric)
    ax.set_xlabel("FID of the train/test split")
    ax.set_ylabel("best value, mean ± std over seeds")
    ax.set_title("Metric vs. distribution shift")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def _save(fig: Any, path: Path) -> Path:
    from dmlplug.engine.atomic import atomic_write

    return atomic_write(path, lambda handle: fig.savefig(handle, format="png", dpi=110))


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


# ---------------------------------------------------------------------------------------------- entry point
def build_report(paths: Sequence[str | Path], *, metrics: Sequence[str] | None = None,
                 figure_dir: Path | None = None) -> Report:
    """Read the runs, group them, and (with ``figure_dir``) draw the PNG figures.

    Raises:
        DataError: No run found, unreadable runs, or an unknown metric.
    """
    runs = [read_run(d) for d in find_runs(paths)]
    groups = group_runs(runs)
    chosen = choose_metrics(groups, metrics)
    report = Report(groups, chosen)
    with_fid = [g for g in groups if g.fid is not None]
    if len({g.fid for g in with_fid}) >= 2:
        from dmlplug.oodml.ags import ags

        for metric in chosen:
            usable = [g for g in with_fid if g.stat("best", metric)[2] > 0]
            if len({g.fid for g in usable}) >= 2:
                report.ags[metric] = ags([g.fid for g in usable], [100 * g.stat("best", metric)[0] for g in usable])
    if figure_dir is not None:
        for metric in chosen[:6]:
            report.figures.append(_save(_learning_curves(groups, metric),
                                        figure_dir / f"curve_{_slug(metric)}.png"))
        if any(r.loss_curve for g in groups for r in g.runs):
            report.figures.append(_save(_loss_curves(groups), figure_dir / "train_loss.png"))
        if report.ags:
            report.figures.append(_save(_metric_vs_fid(groups, list(report.ags)), figure_dir / "metric_vs_fid.png"))
    return report


def write_report(paths: Sequence[str | Path], out: Path | None = None, *, csv_path: Path | None = None,
                 metrics: Sequence[str] | None = None) -> tuple[Report, str]:
    """Build the report and write its files; returns the report and its Markdown.

    With ``out``: the Markdown goes to ``out``, the figures to ``<out stem>_figures/`` and the CSV table to
    ``csv_path`` or else ``<out stem>.csv``. Without ``out`` no figure is drawn (the CSV only with ``csv_path``).
    """
    from dmlplug.engine.atomic import write_text

    figure_dir = out.parent / f"{out.stem}_figures" if out is not None else None
    report = build_report(paths, metrics=metrics, figure_dir=figure_dir)
    text = report.markdown(relative_to=out.parent if out is not None else None)
    if out is not None:
        write_text(out, text)
        csv_path = csv_path or out.with_suffix(".csv")
    if csv_path is not None:
        write_text(csv_path, report.csv())
    return report, text
