"""Summaries of ooDML sweeps: per-split mean ± std over seeds, AGS, metric-vs-FID plot.

``dmlplug oodml summarize SWEEP_DIR`` reads the run directories a sweep wrote (see
:mod:`dmlplug_builtins.oodml.sweep`). Values are fractions in [0, 1] with four decimals, as in ``results.json``
and ``dmlplug report`` (the ooDML tables print them × 100); a single seed shows no standard deviation.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dmlplug.errors import DataError
from dmlplug.evaluation.best import metrics_of, read_best, read_records
from dmlplug.evaluation.formatting import format_mean_spread, format_value
from dmlplug_builtins.oodml.ags import ags, normalized_fids
from dmlplug_builtins.oodml.splitfile import read_split_file
from dmlplug_builtins.oodml.sweep import MANIFEST, SPLITS, run_directory, run_status

DEFAULT_METRICS = ("recall@1", "map@1000", "map@1000_revisiting")
Reduce = Literal["max", "best", "final"]


def run_metrics(directory: Path, reduce: Reduce = "max") -> dict[str, float]:
    """One value per metric for a finished run.

    Args:
        directory: The run directory.
        reduce: ``"max"``: for every metric separately its maximum over the test evaluations after training
            started (the ooDML/Revisiting reporting protocol, docs/methods/revisiting.md; the untrained evaluation
            counts only when there is no other); it needs a test evaluation at every evaluated epoch.
            ``"best"``: the selected checkpoint's metrics on the report split
            (:func:`dmlplug.evaluation.best.read_best`, as ``dmlplug report`` and ``dmlplug export`` read them).
            ``"final"``: the last evaluation of the report split.

    Raises:
        DataError: The run has no usable results, or (``max``) its test split was not evaluated at every epoch.
    """
    if reduce == "best":
        return read_best(directory).metrics
    if reduce == "final":
        results = json.loads((directory / "results.json").read_text(encoding="utf-8"))
        return metrics_of(results.get("metrics") or {})
    records = [r for r in read_records(directory) if "report" not in r]  # re-evaluations are not epochs
    tested = [r for r in records if r.get("split") == "test"]
    if not tested:
        raise DataError(f"run {directory} has no test-split evaluations in metrics.jsonl",
                        fix="use --reduce best or --reduce final (e.g. runs that report on validation)")
    epochs = {int(r.get("epoch", 0)) for r in records if r.get("epoch", 0) > 0}
    missing = sorted(epochs - {int(r.get("epoch", 0)) for r in tested})
    if missing:
        raise DataError(f"run {directory} evaluated the test split at only some epochs (not at {missing[:5]}): "
                        "it selects on another split, so a maximum over its test evaluations is not the maximum "
                        "over epochs", where=str(directory / "metrics.jsonl"),
                        fix="use --reduce best (the selected checkpoint's test values), or train with "
                            "--set evaluation.report_curve=true for a test evaluation at every epoch")
    trained = [r for r in tested if r.get("epoch", 0) > 0] or tested
    metrics: dict[str, float] = {}
    for record in trained:
        for key, value in metrics_of(record).items():
            if math.isfinite(value):
                metrics[key] = max(metrics.get(key, -math.inf), value)
    return metrics


@dataclass
class SplitRow:
    """Aggregated results of one split."""

    split_id: int
    fid: float
    seeds: list[int]
    values: dict[str, list[float]] = field(default_factory=dict)

    def mean(self, metric: str) -> float:
        """Mean over seeds."""
        return float(np.mean(self.values[metric]))

    def std(self, metric: str) -> float | None:
        """Sample standard deviation over seeds; None for a single seed (there is none)."""
        data = self.values[metric]
        return float(np.std(data, ddof=1)) if len(data) > 1 else None

    def cell(self, metric: str) -> str:
        """``mean ± std`` as every dmlplug table shows it (the mean alone for one seed, ``–`` without values)."""
        if metric not in self.values:
            return "–"
        return format_mean_spread(self.mean(metric), self.std(metric), len(self.values[metric]))


@dataclass
class SweepSummary:
    """Per-split rows, AGS per metric, and the files written."""

    sweep_dir: Path
    reduce: str
    metrics: list[str]
    rows: list[SplitRow]
    ags: dict[str, float]
    missing: list[tuple[int, int]]
    files: list[Path] = field(default_factory=list)

    def table(self) -> str:
        """Text table: split, FID, normalised FID, seeds, then mean ± std per metric; AGS last."""
        fids = [r.fid for r in self.rows]
        normal = normalized_fids(fids) if len(set(fids)) > 1 else np.zeros(len(fids))
        header = f"{'split':>5} {'FID':>9} {'nFID':>6} {'seeds':>5}" + "".join(f" {m:>22}" for m in self.metrics)
        lines = [header]
        for row, x in zip(self.rows, normal, strict=True):
            cells = "".join(f" {row.cell(m):>22}" for m in self.metrics)
            lines.append(f"{row.split_id:>5} {row.fid:>9.2f} {x:>6.3f} {len(row.seeds):>5}{cells}")
        ags_cells = "".join(f" {format_value(self.ags.get(m)):>22}" for m in self.metrics)
        lines.append(f"{'AGS':>5} {'':>9} {'':>6} {'':>5}{ags_cells}")
        if self.missing:
            lines.append(f"unfinished runs (split, seed): {self.missing}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready summary (fractions; ``std`` is null for a single seed)."""
        return {
            "reduce": self.reduce,
            "metrics": self.metrics,
            "ags": self.ags,
            "splits": [{"id": r.split_id, "fid": r.fid, "seeds": r.seeds,
                        "mean": {m: r.mean(m) for m in r.values}, "std": {m: r.std(m) for m in r.values},
                        "values": {m: list(vs) for m, vs in r.values.items()}}
                       for r in self.rows],
            "missing_runs": [list(p) for p in self.missing],
        }


def summarize_sweep(sweep_dir: str | Path, *, metrics: Sequence[str] | None = None, reduce: Reduce = "max"
                    ) -> SweepSummary:
    """Collect the finished runs of a sweep and compute per-split statistics and AGS.

    Args:
        sweep_dir: A directory written by ``dmlplug oodml run``.
        metrics: Metric keys to report (default: recall@1, map@1000 and map@1000_revisiting, those present).
        reduce: How a run's evaluations become one value per metric (see :func:`run_metrics`).

    Raises:
        DataError: Not a sweep directory, no finished run, or a requested metric no run produced.
    """
    directory = Path(sweep_dir)
    manifest_path = directory / MANIFEST
    if not manifest_path.is_file():
        raise DataError(f"{directory} is not a sweep directory (no {MANIFEST})",
                        fix="give the --out directory of `dmlplug oodml run`")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    split_file = read_split_file(directory / SPLITS)
    rows, missing = [], []
    for split in split_file.splits:
        row = SplitRow(split.id, split.fid, [])
        for seed in manifest.get("seeds", []):
            run_dir = run_directory(directory, split.id, seed)
            if run_status(run_dir) != "completed":
                if split.id in manifest.get("split_ids", []):
                    missing.append((split.id, seed))
                continue
            values = run_metrics(run_dir, reduce)
            row.seeds.append(seed)
            for key, value in values.items():
                row.values.setdefault(key, []).append(value)
        if row.seeds:
            # A metric counts for a split only when every finished seed has it.
            row.values = {k: v for k, v in row.values.items() if len(v) == len(row.seeds)}
            rows.append(row)
    if not rows:
        raise DataError(f"no finished run in {directory}", fix="run (or continue) the sweep with `dmlplug oodml run`")
    if metrics:
        chosen = list(metrics)
        absent = [m for m in chosen if not any(m in r.values for r in rows)]
        if absent:
            have = sorted({k for r in rows for k in r.values})
            raise DataError(f"metric {absent[0]!r} is not in the runs' results", fix=f"choose among {have}")
    else:
        chosen = [m for m in DEFAULT_METRICS if any(m in r.values for r in rows)]
        if not chosen:
            chosen = sorted({k for r in rows for k in r.values if k != "excluded_queries"})[:3]
    scores = {}
    for metric in chosen:
        usable = [r for r in rows if metric in r.values]
        if len(usable) >= 2 and len({r.fid for r in usable}) > 1:
            scores[metric] = ags([r.fid for r in usable], [r.mean(metric) for r in usable])
    return SweepSummary(directory, reduce, chosen, rows, scores, missing)


def write_outputs(summary: SweepSummary, *, plot: bool = True, tensorboard: bool = True) -> list[Path]:
    """Write ``summary.json``, the metric-vs-FID plot ``ags.png`` and TensorBoard events under ``tb/``.

    TensorBoard gets the scalars ``oodml/<metric>`` (step = split id), ``oodml/ags/<metric>`` and the
    figure ``oodml/metric_vs_fid``.
    """
    from dmlplug.files import atomic_write, write_json

    directory = summary.sweep_dir
    written = [write_json(directory / "summary.json", summary.to_json())]
    figure = None
    if plot or tensorboard:
        figure = _figure(summary)
    if plot and figure is not None:
        written.append(atomic_write(directory / "ags.png", lambda handle: figure.savefig(handle, format="png",
                                                                                          dpi=120)))
    if tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(log_dir=str(directory / "tb"))
        try:
            for row in summary.rows:
                for metric in summary.metrics:
                    if metric in row.values:
                        writer.add_scalar(f"oodml/{metric}", row.mean(metric), row.split_id)
                writer.add_scalar("oodml/fid", row.fid, row.split_id)
            for metric, value in summary.ags.items():
                writer.add_scalar(f"oodml/ags/{metric}", value, 0)
            if figure is not None:
                writer.add_figure("oodml/metric_vs_fid", figure, 0, close=False)
        finally:
            writer.close()
        written.append(directory / "tb")
    if figure is not None:
        import matplotlib.pyplot as plt

        plt.close(figure)
    summary.files = written
    return written


def _figure(summary: SweepSummary) -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fids = [r.fid for r in summary.rows]
    if len(set(fids)) < 2:
        return None
    x_all = dict(zip([r.split_id for r in summary.rows], normalized_fids(fids), strict=True))
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for metric in summary.metrics:
        rows = [r for r in summary.rows if metric in r.values]
        x = [x_all[r.split_id] for r in rows]
        label = metric + (f" (AGS {format_value(summary.ags[metric])})" if metric in summary.ags else "")
        ax.errorbar(x, [r.mean(metric) for r in rows], yerr=[r.std(metric) or 0.0 for r in rows], marker="o",
                    capsize=3, label=label)
    ax.set_xlabel("min-max normalised FID of the split")
    ax.set_ylabel("metric, mean ± std over seeds")
    ax.set_title(f"ooDML: metric vs. distribution shift ({summary.reduce} over epochs)"
                 if summary.reduce == "max" else f"ooDML: metric vs. distribution shift ({summary.reduce})")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig
