"""Figures of ``dmlplug report``: learning curves per metric and the training loss (matplotlib, PNG)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmlplug.report.runs import Group


def learning_curves(groups: Sequence[Group], metric: str) -> Any:
    """``metric`` per epoch, one line per group and evaluated split (mean over seeds, band: min–max).

    The splits are never mixed: a run that selects on ``val`` and reports on ``test`` has a line for each (the
    ``test`` line holds the epochs at which it was evaluated, see docs/evaluation.md), dashed for ``val``.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    splits = {str(rec.get("split", "test")) for g in groups for r in g.runs for rec in r.curves if metric in rec}
    for g in groups:
        per_split: dict[str, dict[int, list[float]]] = {}
        for r in g.runs:
            for rec in r.curves:
                value = rec.get(metric)
                if isinstance(value, int | float) and math.isfinite(value):
                    per_epoch = per_split.setdefault(str(rec.get("split", "test")), {})
                    per_epoch.setdefault(int(rec.get("epoch", 0)), []).append(float(value))
        for split, per_epoch in sorted(per_split.items()):
            epochs = sorted(per_epoch)
            means = [sum(per_epoch[e]) / len(per_epoch[e]) for e in epochs]
            label = f"{g.label} [{split}]" if len(splits) > 1 else g.label
            line = ax.plot(epochs, means, marker="o", label=label, linestyle="--" if split == "val" else "-")[0]
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


def loss_curves(groups: Sequence[Group]) -> Any:
    """``train/loss/total`` per optimizer step, one line per group (mean over seeds)."""
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


def save(fig: Any, path: Path) -> Path:
    """Write ``fig`` as a PNG, atomically; returns ``path``."""
    from dmlplug.files import atomic_write

    return atomic_write(path, lambda handle: fig.savefig(handle, format="png", dpi=110))


def slug(text: str) -> str:
    """``text`` as a file-name part (``recall@1`` -> ``recall_1``)."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)
