"""The statistics of the glyph ooDML study page: split means, the pooled seed noise, AGS and few-shot gains.

Everything here is computed from the collected numbers (:func:`glyphs_oodml_collect.collect`), never from the
run directories, so the page rendered from its committed JSON shows the same values.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dmlplug_builtins.oodml.ags import ags

#: Differences are called real when they exceed this many standard errors (two-sided ~95% under normal noise).
Z = 2.0


def split_means(data: dict[str, Any], stem: str, metric: str) -> dict[int, tuple[float, float | None, int]]:
    """``{split id: (mean, std or None, seeds)}`` of one method and metric."""
    out = {}
    for row in data["methods"][stem]["summary"]["splits"]:
        if metric in row["values"]:
            out[row["id"]] = (row["mean"][metric], row["std"][metric], len(row["values"][metric]))
    return out


def pooled_seed_std(data: dict[str, Any], metric: str) -> tuple[float | None, int]:
    """The seed standard deviation pooled over every (method, split) cell, and its degrees of freedom.

    Each cell of ``n`` seeds contributes ``(n - 1)·s²``; cells of one seed contribute nothing.
    """
    squares, freedom = 0.0, 0
    for stem in data["methods"]:
        for row in data["methods"][stem]["summary"]["splits"]:
            values = row["values"].get(metric, [])
            if len(values) > 1:
                squares += float(np.var(values, ddof=1)) * (len(values) - 1)
                freedom += len(values) - 1
    return (math.sqrt(squares / freedom), freedom) if freedom else (None, 0)


def ags_weights(fids: list[float]) -> np.ndarray:
    """The weights ``w`` with ``AGS = Σ w_i·score_i`` (AGS is linear in the scores)."""
    return np.array([ags(fids, list(np.eye(len(fids))[i])) for i in range(len(fids))])


def noise(data: dict[str, Any], metric: str) -> dict[str, Any]:
    """Standard errors from the pooled seed noise: of one method's split mean, of a difference, of an AGS."""
    sigma, freedom = pooled_seed_std(data, metric)
    seeds = len(data["settings"]["seeds"])
    fids = [s["fid"] for s in data["splits"]]
    if sigma is None:
        return {"sigma": None, "freedom": 0}
    weights = ags_weights(fids)
    ags_se = sigma / math.sqrt(seeds) * float(np.sqrt((weights ** 2).sum()))
    return {"sigma": sigma, "freedom": freedom, "seeds": seeds, "difference_se": sigma * math.sqrt(2 / seeds),
            "ags_se": ags_se, "ags_difference_se": ags_se * math.sqrt(2)}


def fewshot_gains(reports: dict[str, Any], shots: str, metric: str) -> dict[str, Any] | None:
    """Zero-shot and adapted means over seeds and episodes, and the paired gain with its standard error.

    Zero-shot and adapted are measured on the same queries of the same episode, so the gain of every
    (seed, episode) pair is one sample; its standard error is their standard deviation / √count.
    """
    zero, adapted = [], []
    for summary in reports.values():
        modes = summary.get(shots)
        if not modes or metric not in modes.get("adapted", {}):
            continue
        zero += modes["zero_shot"][metric]["values"]
        adapted += modes["adapted"][metric]["values"]
    if not zero:
        return None
    gains = np.asarray(adapted) - np.asarray(zero)
    se = float(np.std(gains, ddof=1) / math.sqrt(len(gains))) if len(gains) > 1 else None
    return {"zero_shot": float(np.mean(zero)), "adapted": float(np.mean(adapted)), "gain": float(gains.mean()),
            "gain_se": se, "samples": len(gains)}
