"""The seed-noise reading of the glyph ooDML study page: which differences exceed the noise, computed.

The sentences and tables are computed from the collected numbers and :mod:`glyphs_oodml_stats`, so the reading
changes with the numbers instead of being written by hand. Every claim rests on the spread of the cells it
involves (a Welch interval, :func:`glyphs_oodml_stats.linear_combination`), never on one pooled σ.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

from glyphs_oodml_collect import METRICS
from glyphs_oodml_stats import (
    CONFIDENCE,
    Interval,
    ags_interval,
    change,
    change_difference,
    difference,
    split_means,
    spread_range,
    t_quantile,
)

from dmlplug.evaluation.formatting import format_value


def signed(value: float) -> str:
    """``+0.0123`` / ``-0.0123`` (four decimals, sign always shown)."""
    return f"{value:+.4f}"


def interval_text(interval: Interval, *, bold: bool = True) -> str:
    """``"+0.0683 ± 0.1025 (df 1.1)"``, bold when the interval excludes zero; the estimate alone without one."""
    half = interval.half_width
    if half is None:
        return f"{signed(interval.estimate)} (no spread: one seed)"
    text = f"{signed(interval.estimate)} ± {half:.4f} (df {interval.df:.1f})"
    return f"**{text}**" if bold and interval.resolved else text


def seed_count(data: dict[str, Any]) -> int:
    """Seeds per cell, as the study was run."""
    return len(data["settings"]["seeds"])


def name(data: dict[str, Any], stem: str) -> str:
    """A method's name in tables."""
    return str(data["methods"][stem]["name"])


def reading(data: dict[str, Any]) -> list[str]:
    """The seed-noise reading: how comparisons are judged, then per metric which exceed the noise."""
    n = seed_count(data)
    level = f"{100 * CONFIDENCE:g}%"
    lines = ["## Reading: what exceeds the seed noise", ""]
    if n < 2:
        return lines + ["One seed per cell: the seed noise is unknown, so no difference on this page can be told "
                        "from it.", ""]
    low_df, high_df = n - 1, 2 * (n - 1)
    lines += [
        f"Each cell of the tables above (one method on one split) is {n} runs, one per seed, and its ± is their "
        "standard deviation s. Every comparison below is a combination of cell means Σ cᵢ·mᵢ: a difference of "
        "two methods on a split, a method's change from the least to the most shifted split, the difference of "
        "two methods' changes (four split means), an AGS (the trapezoid weights over the normalised FIDs) or a "
        "difference of two AGS. Its standard error is √(Σ cᵢ²·sᵢ²/nᵢ) over *the cells it involves* (Welch), "
        f"and its ± is the {level} t half-width with the Welch–Satterthwaite degrees of freedom (df). If every "
        "cell had the same σ, this would be σ·√(2/n) for a difference of two split means and σ·√(4/n) for a "
        "difference of two changes; no σ is pooled here, because one pooled value would lend the noisiest "
        "cells' spread to the quietest and the other way round. A difference **exceeds the noise** (bold) when "
        "its interval excludes zero.",
        "",
        f"What {n} seeds can resolve: each cell's s rests on {n - 1} degree{'s' if n > 2 else ''} of freedom, so "
        f"a comparison of two cells has {low_df} to {high_df} df and t = {t_quantile(low_df):.2f} to "
        f"{t_quantile(high_df):.2f} (the familiar ≈ 2 holds only with many seeds). Only differences many times "
        "the cells' spread are resolved; a difference that is not resolved is one the seeds cannot tell, not "
        f"one shown to be zero. And s itself is uncertain: from {n - 1} degree{'s' if n > 2 else ''} of freedom "
        "a cell's true spread may be several times larger or smaller than its s (the t interval accounts for "
        "that on average, not cell by cell). The intervals are per comparison: among twenty comparisons of "
        "equal methods about one excludes zero by chance.",
        "",
    ]
    for metric in METRICS:
        spreads = spread_range(data, metric)
        if spreads is None:
            lines += [f"**{metric}**: no cell has two seeds, so its seed noise is unknown.", ""]
            continue
        lines += [f"**{metric}.** The cells' seed standard deviations range from {format_value(spreads[0])} to "
                  f"{format_value(spreads[1])}. Difference of each method from the split's highest, ± {level} "
                  "half-width:", ""]
        lines += split_table(data, metric)
        lines += ["", f"* {split_count(data, metric)}", f"* {ags_sentence(data, metric)}", ""]
        lines += degradation(data, metric) + [""]
    return lines


def split_table(data: dict[str, Any], metric: str) -> list[str]:
    """Per split: the highest method and every other method's difference from it with its interval."""
    stems = list(data["methods"])
    lines = ["| split | highest | " + " | ".join(name(data, s) for s in stems) + " |",
             "|---|---|" + "---|" * len(stems)]
    for split in data["splits"]:
        means = {stem: split_means(data, stem, metric).get(split["id"]) for stem in stems}
        present = {stem: m[0] for stem, m in means.items() if m is not None}
        if len(present) < 2:
            continue
        best = max(present, key=lambda stem: present[stem])
        cells = []
        for stem in stems:
            gap = difference(data, metric, split["id"], stem, best) if stem in present else None
            cells.append("–" if gap is None else "highest" if stem == best else interval_text(gap))
        lines.append(f"| {split['id']} | {name(data, best)} {format_value(present[best])} | "
                     + " | ".join(cells) + " |")
    return lines


def split_differences(data: dict[str, Any], metric: str) -> list[Interval]:
    """Every method's difference from the highest method of each split (the cells of :func:`split_table`)."""
    out = []
    for split in data["splits"]:
        present = {stem: m[0] for stem in data["methods"]
                   if (m := split_means(data, stem, metric).get(split["id"])) is not None}
        if len(present) < 2:
            continue
        best = max(present, key=lambda stem: present[stem])
        out += [gap for stem in present if stem != best
                and (gap := difference(data, metric, split["id"], stem, best)) is not None]
    return out


def split_count(data: dict[str, Any], metric: str) -> str:
    """How many of the differences from each split's highest method exceed their interval."""
    gaps = split_differences(data, metric)
    resolved = sum(bool(g.resolved) for g in gaps)
    unresolved = [g for g in gaps if g.resolved is False]
    text = f"{resolved} of the {len(gaps)} differences from a split's highest method exceed the noise"
    if unresolved:
        largest = max(unresolved, key=lambda g: abs(g.estimate))
        text += (f"; the largest one that does not is {signed(largest.estimate)} ± "
                 f"{largest.half_width:.4f}" if largest.half_width is not None else "")
    return text + "."


def ags_sentence(data: dict[str, Any], metric: str) -> str:
    """The AGS ranking, then each method's AGS difference from the best with its interval."""
    scores = {stem: m["summary"]["ags"][metric] for stem, m in data["methods"].items()
              if metric in m["summary"]["ags"]}
    if not scores:
        return "No AGS: the splits do not have two distinct FIDs."
    ranked = sorted(scores, key=lambda stem: scores[stem], reverse=True)
    best = ranked[0]
    text = "AGS ranking: " + " > ".join(f"{name(data, m)} {format_value(scores[m])}" for m in ranked)
    gaps = {m: ags_interval(data, metric, m, best) for m in ranked[1:]}
    parts = [f"{name(data, m)} {interval_text(g)}" for m, g in gaps.items() if g is not None]
    if parts:
        text += f". Difference from {name(data, best)}'s AGS: " + "; ".join(parts)
        unresolved = [name(data, m) for m, g in gaps.items() if g is not None and g.resolved is False]
        text += (f". Not resolved: {', '.join(unresolved)}." if unresolved
                 else ". Every other method's AGS is below the best by more than the noise.")
    return text


def degradation(data: dict[str, Any], metric: str) -> list[str]:
    """Each method's change from the least to the most shifted split, then which pairs of changes differ."""
    first, last = data["splits"][0]["id"], data["splits"][-1]["id"]
    changes = {stem: c for stem in data["methods"] if (c := change(data, metric, stem, first, last)) is not None}
    if not changes:
        return []
    lines = [f"Change from split {first} to split {last} (two split means):", "",
             f"| method | split {first} | split {last} | change | relative change |", "|---|---|---|---|---|"]
    for stem, c in sorted(changes.items(), key=lambda item: item[1].estimate, reverse=True):
        means = split_means(data, stem, metric)
        start = means[first][0]
        relative = f"{100 * c.estimate / start:+.0f}%" if start else "–"
        lines.append(f"| {name(data, stem)} | {format_value(start)} | {format_value(means[last][0])} | "
                     f"{interval_text(c)} | {relative} |")
    pairs: dict[tuple[str, str], Interval] = {}
    for a, b in combinations(sorted(changes, key=lambda s: changes[s].estimate), 2):
        if (both := change_difference(data, metric, a, b, first, last)) is not None:
            pairs[(a, b)] = both
    if not pairs:
        return lines
    resolved = [(a, b, v) for (a, b), v in pairs.items() if v.resolved]
    text = ("Do the methods degrade differently? The difference of two methods' changes involves four split "
            "means, so its standard error is √(Σ s²/n) over four cells (σ·√(4/n) if all four shared one σ). ")
    if resolved:
        text += (f"{len(resolved)} of the {len(pairs)} pairs differ by more than the noise (first method's change "
                 "minus the second's; per-pair intervals, chosen from all pairs after the fact): "
                 + "; ".join(f"{name(data, a)} vs. {name(data, b)} {interval_text(v, bold=False)}"
                             for a, b, v in resolved) + ". ")
    else:
        widest = max(pairs.items(), key=lambda item: abs(item[1].estimate))
        (a, b), v = widest
        text += (f"None of the {len(pairs)} pairs does, not even the most different, {name(data, a)} vs. "
                 f"{name(data, b)} {interval_text(v, bold=False)}: with these seeds the methods cannot be told "
                 "apart by how much they lose. ")
    text += ("A method that starts lower has less to lose before chance level (1 / the number of test classes), "
             "so compare the relative changes too.")
    return lines + ["", text]
