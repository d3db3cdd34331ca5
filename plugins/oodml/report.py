"""The ooDML section of ``dmlplug report``: split FIDs, AGS per metric and the metric-vs-FID figure.

A run trained on an ooDML split has ``[data.dataset] name = "oodml_split"`` in its resolved recipe; the
FID of its split is read from the split file (a relative path is looked for from the working directory,
then from the run directory). Runs of one report group share their recipe, hence their split. The values are
the groups' "best" values: each run's selected checkpoint on its report split, as
:func:`dmlplug.evaluation.best.read_best` defines it for every command (``dmlplug oodml summarize --reduce best``
gives the same AGS).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmlplug.errors import DataError
from dmlplug.evaluation.formatting import format_value
from dmlplug.protocols import ReportSection

TITLE = "ooDML"
COLUMN = "FID"


def run_split(recipe: dict[str, Any]) -> tuple[str, int] | None:
    """``(split_file, split_id)`` of a resolved recipe whose dataset is an ``oodml_split``, else ``None``."""
    table = (recipe.get("data") or {}).get("dataset") or {}
    if table.get("name") != "oodml_split" or not table.get("split_file") or table.get("split_id") is None:
        return None
    return str(table["split_file"]), int(table["split_id"])


def group_fids(groups: Sequence[Any]) -> dict[str, float]:
    """FID of the split of every group (by group key) whose runs trained on a readable ooDML split."""
    from dmlplug_builtins.oodml.splitfile import locate, read_split_file

    files: dict[Path, Any] = {}
    fids: dict[str, float] = {}
    for group in groups:
        for run in group.runs:
            split = run_split(run.recipe)
            if split is None:
                continue
            path = locate(split[0], [run.directory]).resolve()
            if path not in files:
                try:
                    files[path] = read_split_file(path)
                except DataError:
                    files[path] = None  # a moved or unreadable split file: no FID, the report goes on
            fid = next((s.fid for s in files[path].splits if s.id == split[1]), None) if files[path] else None
            if fid is not None:
                fids[group.key] = float(fid)
                break
    return fids


def split_ags(groups: Sequence[Any], fids: dict[str, float], metrics: Sequence[str]) -> dict[str, float]:
    """AGS of every metric over the groups' best values (fractions), for metrics with two or more distinct FIDs.

    A group's value is the mean over its distinct seeds of the selected checkpoints' values (:meth:`Group.stat`).
    """
    from dmlplug_builtins.oodml.ags import ags

    scores = {}
    for metric in metrics:
        usable = [g for g in groups if g.key in fids and g.stat("best", metric)[2] > 0]
        if len({fids[g.key] for g in usable}) >= 2:
            scores[metric] = ags([fids[g.key] for g in usable], [g.stat("best", metric)[0] for g in usable])
    return scores


def oodml_section(groups: Sequence[Any], metrics: Sequence[str], figure_dir: Path | None) -> ReportSection | None:
    """The report section, or ``None`` when no run trained on an ooDML split with a readable split file."""
    fids = group_fids(groups)
    if not fids:
        return None
    scores = split_ags(groups, fids, metrics)
    lines = [f"{len(fids)} of {len(groups)} run groups trained on ooDML splits; column {COLUMN} is the "
             "Fréchet distance of the split's train and test classes."]
    if scores:
        lines += ["", "AGS (area under the metric-vs-normalised-FID curve of the best values: the selected "
                  "checkpoints on the report split): "
                  + ", ".join(f"{m} {format_value(v)}" for m, v in scores.items())]
    figures = []
    if scores and figure_dir is not None:
        figures.append(_save(_metric_vs_fid(groups, fids, list(scores)), figure_dir / "metric_vs_fid.png"))
    return ReportSection(TITLE, markdown="\n".join(lines),
                         columns={key: {COLUMN: f"{fid:.2f}"} for key, fid in fids.items()}, figures=figures)


def _metric_vs_fid(groups: Sequence[Any], fids: dict[str, float], metrics: Sequence[str]) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    points = sorted((g for g in groups if g.key in fids), key=lambda g: fids[g.key])
    for metric in metrics:
        rows = [(fids[g.key], *g.stat("best", metric)) for g in points]
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
    from dmlplug.files import atomic_write

    return atomic_write(path, lambda handle: fig.savefig(handle, format="png", dpi=110))
