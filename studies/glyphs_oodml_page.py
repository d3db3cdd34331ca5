"""The results page of the glyph ooDML study: collect the numbers from a study directory, then render them.

``collect`` reads what ``studies/glyphs_oodml.py run`` wrote, through the functions ``dmlplug oodml summarize``
and ``dmlplug fewshot`` use, so no number on the page is typed by hand. ``render`` turns the collected numbers
(kept beside the page as JSON) into the Markdown page and its figure; the seed-noise reading is computed from the
same numbers. Values are fractions with four decimals, as everywhere in dmlplug.
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
from glyphs_oodml import LOG, METHODS, fewshot_run, most_shifted_split

from dmlplug.evaluation.formatting import format_mean_spread, format_value
from dmlplug_builtins.oodml.ags import ags
from dmlplug_builtins.oodml.summary import summarize_sweep

#: The metrics of the table, the AGS and the figure.
METRICS = ("recall@1", "map@1000")
#: Differences are called real when they exceed this many standard errors (two-sided ~95% under normal noise).
Z = 2.0


# ---------------------------------------------------------------------------------------------------- collect
def collect(study: Path) -> dict[str, Any]:
    """Every number the page shows, from the study directory ``study``.

    Raises:
        DataError: A sweep directory is missing or holds no finished run (from ``summarize_sweep``).
    """
    log = json.loads((study / LOG).read_text())
    settings = log["settings"]
    splits = json.loads((study / "splits.json").read_text())
    methods = {}
    for stem in settings["methods"]:
        summary = summarize_sweep(study / "sweeps" / stem, metrics=list(METRICS), reduce="max")
        methods[stem] = {"name": METHODS[stem], "summary": summary.to_json()}
    hardest = most_shifted_split(study / "splits.json")
    fewshot = {}
    for stem in settings["methods"]:
        reports = {}
        for seed in settings["seeds"]:
            path = fewshot_run(study / "fewshot" / stem, hardest, seed) / "fewshot.json"
            if path.is_file():
                reports[str(seed)] = json.loads(path.read_text())["summary"]
        fewshot[stem] = reports
    extractor = json.loads((study / "extractor" / "results.json").read_text())
    return {
        "settings": settings,
        "machine": log.get("machine"),
        "commands": [{**c, "command": c["command"].replace(str(study), "STUDY")} for c in log["commands"]],
        "protocol": protocol(study, settings),
        "extractor": {"recall@1": extractor["metrics"].get("recall@1"), "recipe": "recipes/study/extractor.toml",
                      "families": extractor_families(study)},
        "splits": [{k: s[k] for k in ("id", "fid", "train", "test", "generator_key")} for s in splits["splits"]],
        "split_info": {k: v for k, v in splits["info"].items() if k not in ("extractor_run",)},
        "most_shifted": hardest,
        "methods": methods,
        "fewshot": fewshot,
    }


def protocol(study: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """What every study run shares, from the recipe a baseline run actually trained (``recipe.resolved.toml``)."""
    run_dir = next((study / "sweeps" / settings["methods"][0]).glob("split-*/seed-*/recipe.resolved.toml"))
    recipe = tomllib.loads(run_dir.read_text())
    dataset = recipe["data"]["dataset"]["dataset"]  # inside the sweep's oodml_split wrapper
    head = recipe["head"]
    return {"families": dataset["families"], "num_classes": dataset["num_classes"],
            "images_per_class": dataset["images_per_class"], "image_size": recipe["data"]["image_size"],
            "batch_size": recipe["data"]["batch_size"], "epochs": recipe["run"]["epochs"],
            "backbone": recipe["backbone"].get("model", recipe["backbone"]["name"]),
            "embedding_size": head.get("embedding_size") or sum(head["heads"].values()),
            "overrides": settings["overrides"]}


def extractor_families(study: Path) -> list[str]:
    """The glyph families the split-generation extractor trained on (its run's resolved recipe)."""
    recipe = tomllib.loads((study / "extractor" / "recipe.resolved.toml").read_text())
    return recipe["data"]["dataset"]["families"]


# ------------------------------------------------------------------------------------------------ statistics
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


# ------------------------------------------------------------------------------------------------------ render
def epochs(protocol_facts: dict[str, Any]) -> str:
    """``"5 epochs"``, ``"1 epoch"``."""
    count = protocol_facts["epochs"]
    return f"{count} epoch" + ("" if count == 1 else "s")


def render(data: dict[str, Any], figure_name: str) -> str:
    """The Markdown page."""
    s = data["settings"]
    p = data["protocol"]
    splits = data["splits"]
    lines = [
        "# ooDML on the embedded glyph dataset: five methods under growing distribution shift",
        "",
        "<!-- Generated by `python studies/glyphs_oodml.py page STUDY` from a study directory; do not edit. -->",
        "",
        "How does each built-in method's retrieval degrade as the train/test shift grows? This page is the ooDML "
        "protocol (Milbich et al., NeurIPS 2021; [docs/oodml.md](../oodml.md)) run end to end on the embedded glyph "
        "dataset, sized for a 2-core CPU. Every number below is read from the study's run directories by "
        "`studies/glyphs_oodml_page.py`; values are fractions (as in `results.json` and `dmlplug report`), "
        f"mean ± standard deviation over {len(s['seeds'])} seeds.",
        "",
        "## Protocol",
        "",
        f"* **Data**: glyphs of {len(p['families'])} families ({', '.join(p['families'])}), {p['num_classes']} "
        f"classes × {p['images_per_class']} images at {p['image_size']} px.",
        f"* **Runs**: the five recipes in `recipes/study/` share data, backbone ({p['backbone']}, random init), "
        f"{p['embedding_size']}-d embedding, batch {p['batch_size']}, {epochs(p)}, Adam and evaluation; only the "
        "method differs. Each run's value is its best test evaluation after training started (the ooDML reporting "
        "protocol, `dmlplug oodml summarize --reduce max`)."
        + (f" Overrides of every run: `{' '.join(p['overrides'])}`." if p["overrides"] else "")
        + " mAP@1000 is the standard normalisation (`map@1000`, divided by R); the ooDML tables divide by R + 1 "
        "(`map@1000_revisiting`, in every sweep's `summary.json` too).",
        f"* **Splits**: `dmlplug oodml splits` with `--extractor-run`: class means of the pooled features of a "
        f"{p['backbone']} trained by `{data['extractor']['recipe']}` on other glyph families "
        f"({', '.join(data['extractor']['families'])}; test recall@1 "
        f"{format_value(data['extractor']['recall@1'])} on their held-out classes). None of its classes is a "
        "study class, so the extractor measures shift without having been fitted to it; it stands in for "
        "ooDML's ImageNet features, which cannot be downloaded here. Swapping, then class removal, "
        f"{data['split_info'].get('candidates')} candidates, {len(splits)} selected evenly over the FID range:",
        "",
        "| split | FID | train classes | test classes | generator |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {x['id']} | {x['fid']:.2f} | {len(x['train'])} | {len(x['test'])} | {x['generator_key']} |"
              for x in splits]
    lines += ["", "## Results", ""]
    for metric in METRICS:
        lines += [f"### {metric}", "",
                  "| method | " + " | ".join(f"split {x['id']} (FID {x['fid']:.1f})" for x in splits) + " | AGS |",
                  "|---|" + "---|" * (len(splits) + 1)]
        for stem, method in data["methods"].items():
            means = split_means(data, stem, metric)
            cells = [format_mean_spread(*means[x["id"]]) if x["id"] in means else "–" for x in splits]
            lines.append(f"| {method['name']} | " + " | ".join(cells)
                         + f" | {format_value(method['summary']['ags'].get(metric))} |")
        lines.append("")
    lines += [f"![{', '.join(METRICS)} against the FID of the split]({figure_name})", ""]
    lines += reading(data)
    lines += fewshot_section(data)
    lines += limits(data)
    lines += commands_section(data)
    return "\n".join(lines) + "\n"


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


def fewshot_section(data: dict[str, Any]) -> list[str]:
    """Few-shot adaptation on the most shifted split: zero-shot, adapted, and the paired gain."""
    shots = [str(k) for k in data["settings"]["shots"]]
    lines = ["## Few-shot adaptation on the most shifted split", "",
             f"Split {data['most_shifted']}: per method a base model trained on the split's `split_train` classes "
             "and selected on `split_val` (`dmlplug oodml run --part few_shot_base --set evaluation.split=val`), "
             f"then `dmlplug fewshot` with the split file's stored episodes ({data['settings']['episodes']} per "
             "shot count): the embedding head is adapted on k support images per test class and the remaining "
             "images are queried. Means over seeds and episodes; the gain is paired (same episode queries), "
             f"its ± is {Z:g} standard errors over the (seed, episode) pairs.", ""]
    for metric in METRICS:
        lines += [f"**{metric}**", "", "| method | " + " | ".join(
            f"{k}-shot zero-shot | {k}-shot adapted | {k}-shot gain" for k in shots) + " |",
            "|---|" + "---|" * (3 * len(shots))]
        for stem, reports in data["fewshot"].items():
            cells = []
            for k in shots:
                g = fewshot_gains(reports, k, metric)
                if g is None:
                    cells += ["–"] * 3
                    continue
                gain = format_value(g["gain"]) if g["gain_se"] is None else \
                    f"{g['gain']:+.4f} ± {Z * g['gain_se']:.4f}"
                cells += [format_value(g["zero_shot"]), format_value(g["adapted"]), gain]
            lines.append(f"| {data['methods'][stem]['name']} | " + " | ".join(cells) + " |")
        lines.append("")
    verdicts = []
    for stem, reports in data["fewshot"].items():
        for k in shots:
            g = fewshot_gains(reports, k, "recall@1")
            if g and g["gain_se"] is not None:
                real = abs(g["gain"]) > Z * g["gain_se"]
                verdicts.append(f"{data['methods'][stem]['name']} {k}-shot: {g['gain']:+.4f} "
                                + ("exceeds the noise" if real else "is within the noise"))
    if verdicts:
        lines += ["recall@1 gains: " + "; ".join(verdicts) + ".", ""]
    return lines


def limits(data: dict[str, Any]) -> list[str]:
    """What the numbers cannot say, whatever they are."""
    p = data["protocol"]
    return ["## Limits", "",
            f"* **Budget.** {epochs(p)} from a random {p['backbone']} at {p['image_size']} px: the runs are "
            "far from converged, and the paper's setting (ImageNet-pretrained ResNet-50, 224 px, ~100 epochs) may "
            "rank the methods differently. The method hyperparameters are those of the repository's glyph recipes, "
            "not tuned for this protocol.",
            "* **Selection on the test set.** Each run's value is its best test evaluation over the epochs, as in "
            "the ooDML tables and the reference code; it is optimistic for every method alike.",
            "* **Shift and size.** Splits beyond the swapping range come from class removal, so the most shifted "
            "splits also train on fewer classes (see the split table); the drop mixes both, as in ooDML. Removal "
            "also shrinks the test set, and recall@1 among fewer classes is easier by chance alone: that works "
            "against the shift, so the change from the least to the most shifted split understates it.",
            f"* **Seeds.** {len(data['settings']['seeds'])} seeds per cell: a single cell's ± is a rough estimate, so "
            "the reading above uses the seed deviation pooled over all cells.",
            ""]


def commands_section(data: dict[str, Any]) -> list[str]:
    """The commands, as the study driver ran them, with wall times and the machine."""
    total = sum(c["seconds"] for c in data["commands"])
    machine = data.get("machine") or {}
    loads = [c.get("load_average") for c in data["commands"] if c.get("load_average") is not None]
    lines = ["## Commands and wall time", "",
             "Everything above comes from two commands (the first resumes where it stopped):", "", "```bash",
             "python studies/glyphs_oodml.py run STUDY", "python studies/glyphs_oodml.py page STUDY", "```", "",
             f"Total wall time {total / 60:.1f} min on {machine.get('cpus', '?')} CPUs "
             f"({machine.get('platform', 'machine not recorded')}, Python {machine.get('python', '?')}, "
             f"torch {machine.get('torch', '?')}, CUDA {'yes' if machine.get('cuda') else 'no'})"
             + (f"; 1-minute load average at the end of the commands {min(loads):.1f}–{max(loads):.1f} "
                "(above the CPU count means other jobs shared the machine and the times are inflated)"
                if loads else "") + ". The `dmlplug` commands the driver issued:", "",
             "| step | seconds | command |", "|---|---|---|"]
    lines += [f"| {c['step']} | {c['seconds']:.0f} | `{c['command']}` |" for c in data["commands"]]
    return lines + [""]


# ----------------------------------------------------------------------------------------------------- figure
def figure(data: dict[str, Any], path: Path) -> Path:
    """Each metric against the split FID, one line per method, error bars = std over seeds."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    from dmlplug.files import atomic_write

    fig = Figure(figsize=(11, 4.2))
    fids = {x["id"]: x["fid"] for x in data["splits"]}
    for position, metric in enumerate(METRICS):
        ax = fig.add_subplot(1, len(METRICS), position + 1)
        for stem, method in data["methods"].items():
            means = split_means(data, stem, metric)
            ids = sorted(means, key=fids.get)
            ax.errorbar([fids[i] for i in ids], [means[i][0] for i in ids],
                        yerr=[means[i][1] or 0.0 for i in ids], marker="o", capsize=3,
                        label=f"{method['name']} (AGS {format_value(method['summary']['ags'].get(metric))})")
        ax.set_xlabel("FID of the split (train vs. test class means)")
        ax.set_ylabel(f"{metric}, mean ± std over seeds")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="x-small")
    fig.suptitle("ooDML on glyphs: retrieval against distribution shift")
    fig.tight_layout()
    return atomic_write(path, lambda handle: fig.savefig(handle, format="png", dpi=100))


def write_page(study: Path, page: Path) -> list[Path]:
    """Collect ``study``, then write ``page``, its figure and its numbers (``.json``); returns the files."""
    from dmlplug.files import write_json, write_text

    data = collect(study)
    numbers = write_json(page.with_suffix(".json"), data)
    image = figure(data, page.with_suffix(".png"))
    text = write_text(page, render(data, image.name))
    return [text, image, numbers]


def render_from_numbers(page: Path) -> str:
    """The page rendered again from its ``.json`` (tests check it equals the committed page)."""
    return render(json.loads(page.with_suffix(".json").read_text()), page.with_suffix(".png").name)


