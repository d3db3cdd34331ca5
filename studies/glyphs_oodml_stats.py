"""The statistics of the glyph ooDML study page: per-cell intervals for comparisons, AGS, and few-shot gains.

Everything here is computed from the collected numbers (:func:`glyphs_oodml_collect.collect`), never from the
run directories, so the page rendered from its committed JSON shows the same values.

**Zero-shot comparisons.** A *cell* is one method on one split: ``n`` seeds, each an independent training run,
with mean ``m`` and sample variance ``s²`` (``ddof = 1``). Every comparison on the page is a linear combination
``Σ cᵢ·mᵢ`` of cell means: a difference of two methods on a split (``c = +1, −1``), one method's change from the
least to the most shifted split (``+1, −1``), the difference of two methods' changes (four cells, ``+1, −1, −1,
+1``), an AGS (the trapezoid weights, :func:`ags_weights`) and a difference of two AGS. Its standard error uses
the spread of *the cells involved*, not one σ pooled over all cells (the cells' spreads differ by two orders of
magnitude, and with two seeds a pooled σ would lend the noisy cells' noise to the quiet cells and vice versa)::

    SE² = Σ cᵢ²·sᵢ²/nᵢ                                       (Welch)
    df  = (Σ aᵢ)² / Σ aᵢ²/(nᵢ − 1),   aᵢ = cᵢ²·sᵢ²/nᵢ          (Welch–Satterthwaite)

and the 95% interval is ``estimate ± t_{0.975, df}·SE``. A difference *exceeds the noise* when that interval
excludes zero. With the same σ and ``n`` in every cell, ``SE = σ·√(Σcᵢ²/n)``: ``σ·√(2/n)`` for a difference of
two split means, ``σ·√(4/n)`` for a difference of two changes (four split means). The df lie between
``min(nᵢ − 1)`` and ``Σ(nᵢ − 1)``: with two seeds per cell, 1 to 2 for a difference of two cells. Cells are
assumed independent: each is its own set of runs (another split or another method); a seed number shared by two
cells gives them at most the same initial weights.

**Few-shot gains** are nested: the episodes of one seed all adapt the same base model, so they measure that
model's gain, not how the gain varies between trained base models (:func:`fewshot_gains`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from dmlplug_builtins.oodml.ags import ags

#: Two-sided confidence level of every interval on the page.
CONFIDENCE = 0.95


def t_quantile(df: float, confidence: float = CONFIDENCE) -> float:
    """The two-sided Student-t critical value ``t_{(1 + confidence)/2, df}`` (``df`` need not be an integer).

    Args:
        df: Degrees of freedom, > 0.
        confidence: Two-sided confidence level in ``(0, 1)``.

    Returns:
        The critical value (12.706 for ``df = 1`` at 95%, 4.303 for 2, → 1.960 as ``df`` grows).
    """
    from scipy import stats

    return float(stats.t.ppf((1.0 + confidence) / 2.0, df))


@dataclass(frozen=True)
class Interval:
    """An estimate with its standard error and degrees of freedom, and the t interval they give.

    Attributes:
        estimate: The estimated quantity (a mean, a difference, an AGS, a gain).
        se: Its standard error; ``None`` when a cell it depends on has a single seed (no spread to estimate).
        df: Degrees of freedom of ``se``; ``None`` with ``se``.
    """

    estimate: float
    se: float | None
    df: float | None

    @property
    def half_width(self) -> float | None:
        """``t_{0.975, df} · se``; ``None`` without a standard error."""
        if self.se is None or self.df is None:
            return None
        return t_quantile(self.df) * self.se

    @property
    def resolved(self) -> bool | None:
        """Whether the 95% interval excludes zero; ``None`` without a standard error."""
        half = self.half_width
        return None if half is None else abs(self.estimate) > half


def linear_combination(terms: Sequence[tuple[float, Sequence[float]]]) -> Interval:
    """``Σ cᵢ·mean(xᵢ)`` over independent cells, with its Welch standard error and Satterthwaite df.

    ``SE² = Σ cᵢ²·sᵢ²/nᵢ`` and ``df = (Σ aᵢ)² / Σ aᵢ²/(nᵢ − 1)`` with ``aᵢ = cᵢ²·sᵢ²/nᵢ`` (``s²`` the sample
    variance, ``ddof = 1``). Terms with ``c = 0`` are ignored. When every involved cell has zero spread, the
    df are ``min(nᵢ − 1)`` (the smallest Satterthwaite value), so the interval is as wide as it can be.

    Args:
        terms: ``(coefficient, seed values of one cell)`` pairs; each cell must have at least one value.

    Returns:
        The :class:`Interval`; without standard error when an involved cell has a single value.

    Raises:
        ValueError: A cell has no values.
    """
    estimate, variance, denominator, freedoms = 0.0, 0.0, 0.0, []
    single = False
    for coefficient, values in terms:
        data = np.asarray(values, dtype=np.float64)
        if data.size == 0:
            raise ValueError("a cell of the combination has no values")
        estimate += coefficient * float(data.mean())
        if coefficient == 0:
            continue
        if data.size < 2:
            single = True
            continue
        part = coefficient ** 2 * float(data.var(ddof=1)) / data.size
        variance += part
        denominator += part ** 2 / (data.size - 1)
        freedoms.append(data.size - 1)
    if single or not freedoms:
        return Interval(estimate, None, None)
    df = variance ** 2 / denominator if denominator > 0 else float(min(freedoms))
    return Interval(estimate, math.sqrt(variance), df)


# ------------------------------------------------------------------------------------------------- cells
def split_means(data: dict[str, Any], stem: str, metric: str) -> dict[int, tuple[float, float | None, int]]:
    """``{split id: (mean, std or None, seeds)}`` of one method and metric."""
    out = {}
    for row in data["methods"][stem]["summary"]["splits"]:
        if metric in row["values"]:
            out[row["id"]] = (row["mean"][metric], row["std"][metric], len(row["values"][metric]))
    return out


def cell_values(data: dict[str, Any], stem: str, metric: str) -> dict[int, list[float]]:
    """``{split id: [per-seed values]}`` of one method and metric."""
    return {row["id"]: list(row["values"][metric]) for row in data["methods"][stem]["summary"]["splits"]
            if metric in row["values"]}


def spread_range(data: dict[str, Any], metric: str) -> tuple[float, float] | None:
    """The smallest and largest per-cell seed standard deviation over all (method, split) cells."""
    spreads = [float(np.std(values, ddof=1)) for stem in data["methods"]
               for values in cell_values(data, stem, metric).values() if len(values) > 1]
    return (min(spreads), max(spreads)) if spreads else None


def difference(data: dict[str, Any], metric: str, split_id: int, a: str, b: str) -> Interval | None:
    """Method ``a`` minus method ``b`` on one split; ``None`` when either cell is missing."""
    cells_a, cells_b = cell_values(data, a, metric), cell_values(data, b, metric)
    if split_id not in cells_a or split_id not in cells_b:
        return None
    return linear_combination([(1.0, cells_a[split_id]), (-1.0, cells_b[split_id])])


def change(data: dict[str, Any], metric: str, stem: str, first: int, last: int) -> Interval | None:
    """One method's change from split ``first`` to split ``last`` (two split means); ``None`` if one is missing."""
    cells = cell_values(data, stem, metric)
    if first not in cells or last not in cells:
        return None
    return linear_combination([(1.0, cells[last]), (-1.0, cells[first])])


def change_difference(data: dict[str, Any], metric: str, a: str, b: str, first: int, last: int
                      ) -> Interval | None:
    """``a``'s change minus ``b``'s change from ``first`` to ``last``: four split means, ``σ·√(4/n)`` if equal."""
    cells_a, cells_b = cell_values(data, a, metric), cell_values(data, b, metric)
    if not all(i in cells for cells in (cells_a, cells_b) for i in (first, last)):
        return None
    return linear_combination([(1.0, cells_a[last]), (-1.0, cells_a[first]),
                               (-1.0, cells_b[last]), (1.0, cells_b[first])])


# --------------------------------------------------------------------------------------------------- AGS
def ags_weights(fids: Sequence[float]) -> np.ndarray:
    """The weights ``w`` with ``AGS = Σ wᵢ·scoreᵢ`` (AGS is linear in the scores; trapezoid rule)."""
    return np.array([ags(list(fids), list(np.eye(len(fids))[i])) for i in range(len(fids))])


def ags_interval(data: dict[str, Any], metric: str, stem: str, other: str | None = None) -> Interval | None:
    """A method's AGS (``Σ wᵢ·mᵢ`` over its split cells), or its difference from ``other``'s AGS.

    Only splits that every involved method has enter, as in ``summarize_sweep`` when all runs finished.

    Args:
        data: The collected numbers.
        metric: The metric.
        stem: The method.
        other: The method whose AGS is subtracted, if any.

    Returns:
        The :class:`Interval`, or ``None`` with fewer than two distinct FIDs.
    """
    fids = {s["id"]: s["fid"] for s in data["splits"]}
    stems = [stem] if other is None else [stem, other]
    cells = [cell_values(data, s, metric) for s in stems]
    ids = [i for i in fids if all(i in c for c in cells)]
    if len({fids[i] for i in ids}) < 2:
        return None
    weights = ags_weights([fids[i] for i in ids])
    terms = [(sign * float(w), c[i]) for sign, c in zip((1.0, -1.0), cells, strict=False)
             for w, i in zip(weights, ids, strict=True)]
    return linear_combination(terms)


# ---------------------------------------------------------------------------------------------- few-shot
def nested_mean(groups: Sequence[ArrayLike]) -> dict[str, Any]:
    """Mean of grouped values whose groups (seeds) are the replicates, with a two-level standard error.

    The values of one group (the episodes of one seed) share a random effect (that seed's base model), so
    they are averaged first: ``gₛ`` = group mean, estimate ``ḡ = mean(gₛ)`` (every seed weighs the same). One-way
    random-effects model ``x = μ + bₛ + e``, ``Var b = σ²_b`` (between seeds), ``Var e = σ²_w`` (within)::

        σ̂²_w = Σ (eₛ − 1)·vₛ / Σ (eₛ − 1)                   (vₛ: sample variance of group s, eₛ values)
        SE²  = max(s²_g, σ̂²_w · mean(1/eₛ)) / n            (s²_g: sample variance of the n group means)
        σ̂²_b = max(0, s²_g − σ̂²_w · mean(1/eₛ))
        df   = n − 1;  95% half-width = t_{0.975, n−1} · SE

    ``s²_g / n`` alone is the unbiased estimate of ``Var ḡ = (σ²_b + σ²_w/e)/n``; the floor is the ANOVA
    estimate with the between-seed component truncated at zero: group means cannot truly vary less than their
    own episode noise, so when the seeds happen to agree more closely than that, the episode noise is used.
    That can only widen the interval; the df stay ``n − 1``, the seeds being the replicates. With two seeds
    ``t = 12.71``: the half-width is at least ``12.71·|g₁ − g₂|/2 ≈ 6.4·|g₁ − g₂|``.

    Args:
        groups: One sequence of values per seed (each non-empty).

    Returns:
        ``{"mean", "group_means", "se", "df", "half_width", "within_var", "between_var", "groups", "values",
        "pooled_se"}``; ``se``, ``df``, ``half_width`` and ``between_var`` are ``None`` for a single group,
        ``within_var`` is ``None`` when no group has two values. ``pooled_se`` is the standard error that
        treats all values as independent (``std(all, ddof=1)/√N``), for comparison only; ``None`` for N = 1.

    Raises:
        ValueError: ``groups`` or one of them is empty.
    """
    arrays = [np.asarray(g, dtype=np.float64).ravel() for g in groups]
    if not arrays or any(a.size == 0 for a in arrays):
        raise ValueError("need at least one group, each with at least one value")
    means = np.array([a.mean() for a in arrays])
    freedom = sum(a.size - 1 for a in arrays)
    within = (sum(float(a.var(ddof=1)) * (a.size - 1) for a in arrays if a.size > 1) / freedom
              if freedom else None)
    out: dict[str, Any] = {"mean": float(means.mean()), "group_means": [float(m) for m in means],
                           "se": None, "df": None, "half_width": None, "within_var": within,
                           "between_var": None, "groups": len(arrays), "values": sum(a.size for a in arrays)}
    pooled = np.concatenate(arrays)
    out["pooled_se"] = float(pooled.std(ddof=1)) / math.sqrt(pooled.size) if pooled.size > 1 else None
    if len(arrays) < 2:
        return out
    spread = float(means.var(ddof=1))
    floor = (within or 0.0) * float(np.mean([1.0 / a.size for a in arrays]))
    se = math.sqrt(max(spread, floor) / len(arrays))
    df = float(len(arrays) - 1)
    out.update(se=se, df=df, half_width=t_quantile(df) * se, between_var=max(0.0, spread - floor))
    return out


def fewshot_gains(reports: dict[str, Any], shots: str, metric: str) -> dict[str, Any] | None:
    """Zero-shot and adapted means and the paired gain, with seeds (base models) as the replicates.

    Zero-shot and adapted are measured on the same queries of the same episode, so each episode gives one
    paired gain. The episodes of one seed share its base model, so they are not independent replicates of the
    method: the gain is averaged over the episodes of each seed first and its standard error has
    ``seeds − 1`` degrees of freedom (:func:`nested_mean`), not ``seeds·episodes − 1``.

    Args:
        reports: ``{seed: fewshot.json summary}`` of one method.
        shots: The shot count, as the summary's key (``"2"``).
        metric: The metric.

    Returns:
        ``{"zero_shot", "adapted"}`` (means of the seed means) and ``"gain"`` (:func:`nested_mean` of the
        per-episode gains grouped by seed), or ``None`` when no seed has this shot count and metric.

    Raises:
        ValueError: A seed's zero-shot and adapted values differ in length.
    """
    zero: list[float] = []
    adapted: list[float] = []
    gains: list[np.ndarray] = []
    for seed in sorted(reports, key=str):
        modes = reports[seed].get(shots)
        if not modes or metric not in modes.get("adapted", {}):
            continue
        z = np.asarray(modes["zero_shot"][metric]["values"], dtype=np.float64)
        a = np.asarray(modes["adapted"][metric]["values"], dtype=np.float64)
        if z.shape != a.shape or z.size == 0:
            raise ValueError(f"seed {seed}, {shots}-shot {metric}: zero-shot and adapted values do not pair up")
        zero.append(float(z.mean()))
        adapted.append(float(a.mean()))
        gains.append(a - z)
    if not gains:
        return None
    return {"zero_shot": float(np.mean(zero)), "adapted": float(np.mean(adapted)), "gain": nested_mean(gains)}
