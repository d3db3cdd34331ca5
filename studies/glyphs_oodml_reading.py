"""The seed-noise reading of the glyph ooDML study page: which differences exceed the noise, in sentences.

The sentences are computed from the collected numbers and :mod:`glyphs_oodml_stats`, so the reading changes
with the numbers instead of being written by hand.
"""

from __future__ import annotations

from typing import Any

from glyphs_oodml_collect import METRICS
from glyphs_oodml_stats import Z, noise, split_means

from dmlplug.evaluation.formatting import format_value


def reading(data: dict[str, Any]) -> list[str]:
    """The seed-noise reading: which differences exceed the noise and which do not, computed."""
    lines = ["## Reading: what exceeds the seed noise", ""]
    for metric in METRICS:
        n = noise(data, metric)
        if n["sigma"] is None:
            lines += [f"**{metric}**: one seed per run, so the seed noise is unknown and no difference below can be "
                      "told from it.", ""]
            continue
        margin = Z * n["difference_se"]
        lines += [f"**{metric}.** Seed standard deviation, pooled over all method×split cells: "
                  f"σ = {format_value(n['sigma'])} ({n['freedom']} degrees of freedom). With {n['seeds']} seeds a "
                  f"difference of two methods on one split has standard error σ·√(2/{n['seeds']}) = "
                  f"{format_value(n['difference_se'])}; below, a difference counts only beyond {Z:g} of them "
                  f"({format_value(margin)}), an AGS difference beyond {Z:g}·{format_value(n['ags_difference_se'])}"
                  f" = {format_value(Z * n['ags_difference_se'])}.", ""]
        lines += [f"* {sentence}" for sentence in split_sentences(data, metric, margin)]
        lines += [f"* {ags_sentence(data, metric, Z * n['ags_difference_se'])}"]
        lines += [f"* {sentence}" for sentence in degradation_sentences(data, metric, margin)]
        lines.append("")
    return lines


def split_sentences(data: dict[str, Any], metric: str, margin: float) -> list[str]:
    """Per split: the best method, and which others are within the margin of it."""
    out = []
    for split in data["splits"]:
        means = {stem: split_means(data, stem, metric).get(split["id"]) for stem in data["methods"]}
        means = {stem: m[0] for stem, m in means.items() if m is not None}
        if len(means) < 2:
            continue
        best = max(means, key=means.get)
        tied = [data["methods"][m]["name"] for m in means if m != best and means[best] - means[m] <= margin]
        beaten = [data["methods"][m]["name"] for m in means if m != best and means[best] - means[m] > margin]
        text = f"Split {split['id']}: {data['methods'][best]['name']} is highest ({format_value(means[best])})"
        if tied:
            text += f"; {', '.join(tied)} {'is' if len(tied) == 1 else 'are'} within the noise of it"
        if beaten:
            text += f"; {', '.join(beaten)} {'is' if len(beaten) == 1 else 'are'} below it by more than the noise"
        out.append(text + ".")
    return out


def ags_sentence(data: dict[str, Any], metric: str, margin: float) -> str:
    """The AGS ranking, grouping methods whose AGS are within ``margin`` of the best."""
    scores = {stem: m["summary"]["ags"][metric] for stem, m in data["methods"].items() if metric in m["summary"]["ags"]}
    if not scores:
        return "No AGS: the splits do not have two distinct FIDs."
    ranked = sorted(scores, key=scores.get, reverse=True)
    best = ranked[0]
    text = "AGS ranking: " + " > ".join(f"{data['methods'][m]['name']} {format_value(scores[m])}" for m in ranked)
    tied = [data["methods"][m]["name"] for m in ranked[1:] if scores[best] - scores[m] <= margin]
    text += (f". Within the noise of the best: {', '.join(tied)}." if tied
             else ". Every other method's AGS is below the best by more than the noise.")
    return text


def degradation_sentences(data: dict[str, Any], metric: str, margin: float) -> list[str]:
    """Each method's change from the least to the most shifted split, and whether it exceeds the noise."""
    first, last = data["splits"][0]["id"], data["splits"][-1]["id"]
    drops, starts = {}, {}
    for stem in data["methods"]:
        means = split_means(data, stem, metric)
        if first in means and last in means:
            drops[stem] = means[last][0] - means[first][0]
            starts[stem] = means[first][0]
    if not drops:
        return []
    parts = [f"{data['methods'][m]['name']} {d:+.4f}"
             + (f" ({100 * d / starts[m]:+.0f}% of its split-{first} value)" if starts[m] else "")
             + ("" if abs(d) > margin else ", within the noise")
             for m, d in sorted(drops.items(), key=lambda item: item[1], reverse=True)]
    out = [f"From split {first} to split {last}, {metric} changes by: " + ", ".join(parts) + "."]
    if len(drops) > 1:
        spread = max(drops.values()) - min(drops.values())
        out.append(f"These changes differ between methods by at most {format_value(spread)}, "
                   + ("more" if spread > margin else "not more") + " than the noise of a difference (a change is "
                   "itself a difference of two split means, with the same standard error), so the methods "
                   + ("do not all degrade alike." if spread > margin else "cannot be told apart by how they "
                      "degrade.") + " A method that starts lower has less to lose before chance level "
                   "(1 / the number of test classes), so compare the relative changes too.")
    return out
