"""The results page of the tuned glyph study: collect the numbers from a study directory, then render them.

``collect`` reads what ``studies/glyphs_tune.py run`` wrote — each search's Optuna study (through
``dmlplug_builtins.tune.report.load``, as ``dmlplug tune report`` does), its ``reproductions/summary.json``, the
untuned runs' ``results.json`` — and the untuned ooDML study's committed numbers. ``render`` turns the collected
numbers (kept beside the page as JSON) into the page; every interval, ranking and verdict in its text is computed
from them (:func:`glyphs_oodml_stats.linear_combination`: Welch standard errors, Satterthwaite df, 95% t).
"""

from __future__ import annotations

import json
import statistics
from itertools import combinations
from pathlib import Path
from typing import Any

from glyphs_oodml import METHODS
from glyphs_oodml_stats import Interval, linear_combination, t_quantile

from dmlplug.evaluation.formatting import format_value

LOG = "study.json"


# ----------------------------------------------------------------------------------------------------- collect
def collect(out: Path, oodml_numbers: Path) -> dict[str, Any]:
    """Every number of the page, from the study directory ``out`` and the ooDML study's ``.json``."""
    from glyphs_tune import SPACES

    import dmlplug
    from dmlplug_builtins.tune.report import load
    from dmlplug_builtins.tune.space import load_space

    log = json.loads((out / LOG).read_text())
    settings = log["settings"]
    methods: dict[str, Any] = {}
    space = None
    for stem in settings["methods"]:
        tune_dir = out / "tunes" / stem
        space = load_space(SPACES / f"{stem}.space.toml", registry=dmlplug.plugin_host().registry)
        metric = space.settings.metric
        _, study = load(tune_dir, None)
        states = {state: sum(1 for t in study.trials if t.state.name.lower() == state)
                  for state in ("complete", "pruned", "fail")}
        best = study.best_trial if states["complete"] else None
        summary = json.loads((tune_dir / "reproductions" / "summary.json").read_text())
        untuned = [json.loads((out / "untuned" / stem / f"seed-{seed}" / "results.json").read_text())
                   ["metrics"][metric] for seed in range(settings["reproductions"])]
        epochs = sum(json.loads(path.read_text()).get("epochs_completed", 0)
                     for path in sorted((tune_dir / "trials").glob("trial-*/fold-*/results.json")))
        methods[stem] = {
            "name": METHODS[stem], "trials": states, "fold_epochs": epochs,
            "best_cv": best.value if best else None, "best_trial": best.number if best else None,
            "best_params": dict(best.params) if best else {}, "tuned": summary["scores"], "untuned": untuned,
            "space": {key: describe(param) for key, param in space.params.items()},
        }
    assert space is not None
    oodml = json.loads(oodml_numbers.read_text())
    reference = {}
    for stem in settings["methods"]:
        entry = oodml["methods"].get(stem)
        if entry:
            first = min(entry["summary"]["splits"], key=lambda split: split["fid"])
            reference[stem] = {"ags": entry["summary"]["ags"][metric], "least_shifted": first["mean"][metric]}
    return {
        "settings": settings, "machine": log.get("machine", {}), "metric": space.settings.metric,
        "protocol": protocol(settings, space), "methods": methods,
        "oodml": {"source": "docs/results/glyphs-oodml.json", "epochs": oodml["protocol"]["epochs"],
                  "seeds": len(oodml["settings"]["seeds"]), "num_splits": oodml["settings"]["num_splits"],
                  "methods": reference},
        "commands": [{key: command[key] for key in ("step", "command", "seconds", "load_average")}
                     | {"command": command["command"].replace(str(out), "STUDY")} for command in log["commands"]],
    }


def describe(param: Any) -> str:
    """A parameter of a space as the page lists it: ``[1e-04, 1e-02] log``, ``{a, b}``."""
    if param.type == "categorical":
        return "{" + ", ".join(map(str, param.choices)) + "}"
    return f"[{param.low:g}, {param.high:g}]" + (" log" if param.log else "")


def protocol(settings: dict[str, Any], space: Any) -> dict[str, Any]:
    """The facts of the data and the search every method shares (read from a validated study recipe)."""
    import dmlplug

    recipe = dmlplug.validate(str(space.recipe_path), [f"run.epochs={settings['epochs']}", *settings["overrides"]])
    data = recipe.resolved()["data"]
    dataset = data["dataset"]
    # the page's numbers keep their keys: tpe_startup_trials is the TPE sampler's startup_trials
    sampler, pruner = space.settings.sampler.to_dict(), space.settings.pruner.to_dict()
    return {"num_classes": dataset.get("num_classes"), "images_per_class": dataset.get("images_per_class"),
            "families": len(dataset.get("families") or []), "image_size": data.get("image_size"),
            "batch_size": data["batch_size"], "folds": space.settings.folds, "sampler": sampler["name"],
            "sampler_seed": space.settings.sampler_seed, "tpe_startup_trials": sampler.get("startup_trials"),
            "pruner": pruner["name"], "startup_trials": pruner.get("startup_trials", 0)}


# ------------------------------------------------------------------------------------------------------ render
def interval(values: list[float]) -> Interval:
    """The mean of ``values`` with its standard error and df."""
    return linear_combination([(1.0, values)])


def mean_ci(values: list[float]) -> str:
    """``"0.4123 ± 0.0210"`` (95% t half-width), or the mean alone for one value."""
    half = interval(values).half_width
    return format_value(statistics.fmean(values)) + ("" if half is None else f" ± {format_value(half)}")


def difference(a: list[float], b: list[float]) -> Interval:
    """``mean(a) - mean(b)`` over independent seeds (Welch)."""
    return linear_combination([(1.0, a), (-1.0, b)])


def signed(value: Interval) -> str:
    """``"+0.0123 ± 0.0200 (df 3.1)"``, bold when the interval excludes zero."""
    text = f"{value.estimate:+.4f}"
    if value.half_width is None:
        return text
    text += f" ± {format_value(value.half_width)} (df {value.df:.1f})"
    return f"**{text}**" if value.resolved else text


def plural(count: int, word: str) -> str:
    """``"1 trial"``, ``"8 trials"``."""
    return f"{count} {word}" + ("" if count == 1 else "s")


def ranking(values: dict[str, float]) -> list[str]:
    """Stems from the highest value to the lowest."""
    return sorted(values, key=lambda stem: -values[stem])


def render(data: dict[str, Any]) -> str:
    """The Markdown page."""
    s, p, metric, methods = data["settings"], data["protocol"], data["metric"], data["methods"]
    stems = list(methods)
    names = {stem: methods[stem]["name"] for stem in stems}
    budget = s["trials"] * p["folds"] * s["epochs"]
    lines = [
        "# Tuned with the same budget: the five glyph study methods under the Reality-Check protocol",
        "",
        "<!-- Generated by `python studies/glyphs_tune.py page STUDY` from a study directory (or "
        "`page --from-numbers` from the .json beside this page); do not edit. -->",
        "",
        f"Does tuning change how the built-in methods rank? Each of {len(stems)} methods of the glyph ooDML study "
        "([glyphs-oodml.md](glyphs-oodml.md)) is tuned by `dmlplug tune` ([docs/tune.md](../tune.md)) with the "
        "same budget, then its best configuration and its untuned recipe are trained with the same seeds and "
        f"evaluated on the test classes. Values are fractions ({metric}); ± is the 95% t half-width.",
        "",
        "## Protocol",
        "",
        f"* **Data**: the study recipes' glyphs ({p['families']} families, {p['num_classes']} classes × "
        f"{p['images_per_class']} images at {p['image_size']} px, batch {p['batch_size']}), their standard "
        f"train/test classes; every run trains {plural(s['epochs'], 'epoch')}"
        + (f" (overrides: `{' '.join(s['overrides'])}`)" if s["overrides"] else "") + ".",
        f"* **Budget, the same for every method**: {plural(s['trials'], 'trial')} × {p['folds']} class-disjoint "
        f"folds of the training classes × {plural(s['epochs'], 'epoch')} = at most {budget} fold-epochs; sampler "
        f"`{p['sampler']}` (seed {p['sampler_seed']}"
        + (f"; its first {plural(p['tpe_startup_trials'], 'trial')} at random" if p["sampler"] == "tpe" else "")
        + f"), pruner `{p['pruner']}` on the running fold mean after "
        f"{p['startup_trials']} finished trials. The objective is the mean validation {metric} over the folds; "
        "the test classes are never seen.",
        f"* **Test**: the best configuration (`tuned`) and the recipe as written (`untuned`) each trained on all "
        f"training classes with seeds 0–{s['reproductions'] - 1} and evaluated once, final model, on the test "
        "classes: same data, epochs and seeds, only the configuration differs.",
        "",
        "| method | searched (besides the recipe's values) |",
        "|---|---|",
        *(f"| {names[stem]} | " + ", ".join(f"`{k}` {v}" for k, v in methods[stem]["space"].items()) + " |"
          for stem in stems),
        "",
        "## Results",
        "",
        f"| method | trials (complete / pruned / failed) | fold-epochs trained | best cross-validated {metric} | "
        f"tuned test {metric} | untuned test {metric} | tuned − untuned |",
        "|---|---|---|---|---|---|---|",
    ]
    gains = {}
    for stem in stems:
        m = methods[stem]
        gains[stem] = difference(m["tuned"], m["untuned"])
        t = m["trials"]
        lines.append(f"| {names[stem]} | {t['complete']} / {t['pruned']} / {t['fail']} | {m['fold_epochs']} | "
                     f"{format_value(m['best_cv'])} | {mean_ci(m['tuned'])} | {mean_ci(m['untuned'])} | "
                     f"{signed(gains[stem])} |")
    lines += ["", "Best configurations (`dmlplug tune report STUDY/tunes/METHOD` writes each as a recipe):", "",
              "| method | trial | values |", "|---|---|---|"]
    for stem in stems:
        m = methods[stem]
        values = ", ".join(f"`{k}` = {v:.4g}" if isinstance(v, float) else f"`{k}` = {v}"
                           for k, v in m["best_params"].items())
        lines.append(f"| {names[stem]} | {m['best_trial'] if m['best_trial'] is not None else '–'} | {values} |")
    lines += ["", *rankings_section(data), "", *reading(data, gains), "", *commands_section(data)]
    return "\n".join(lines) + "\n"


def rankings_section(data: dict[str, Any]) -> list[str]:
    """The four orders side by side, and what changed."""
    methods, reference = data["methods"], data["oodml"]["methods"]
    names = {stem: methods[stem]["name"] for stem in methods}
    orders = {"tuned": ranking({s: statistics.fmean(m["tuned"]) for s, m in methods.items()}),
              "untuned": ranking({s: statistics.fmean(m["untuned"]) for s, m in methods.items()})}
    columns = [("tuned (this study)", orders["tuned"]), ("untuned (this study)", orders["untuned"])]
    if len(reference) == len(methods):
        o = data["oodml"]
        orders["ags"] = ranking({s: r["ags"] for s, r in reference.items()})
        orders["least"] = ranking({s: r["least_shifted"] for s, r in reference.items()})
        columns += [(f"ooDML study, AGS ({o['num_splits']} splits)", orders["ags"]),
                    ("ooDML study, least shifted split", orders["least"])]
    lines = ["## Rankings", "", "| rank | " + " | ".join(title for title, _ in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for position in range(len(methods)):
        lines.append(f"| {position + 1} | " + " | ".join(names[order[position]] for _, order in columns) + " |")
    lines.append("")
    lines.append("* " + order_change("the untuned recipes (this study)", orders["untuned"], orders["tuned"], names,
                                     methods))
    if "ags" in orders:
        lines.append("* " + order_change("the untuned ooDML study (AGS)", orders["ags"], orders["tuned"], names,
                                         methods))
        o = data["oodml"]
        lines.append(f"* The ooDML numbers come from {o['source']}: other class splits (the ooDML train/test "
                     f"splits), {o['epochs']} epochs, the best test evaluation of each run, {o['seeds']} seeds. "
                     "Their values are not comparable with this page's; only their order is.")
    return lines


def order_change(label: str, before: list[str], after: list[str], names: dict[str, str],
                 methods: dict[str, Any]) -> str:
    """A sentence: whether ``after`` orders the methods as ``before`` does, and which swaps the seeds resolve."""
    swapped = [(a, b) for a, b in combinations(before, 2) if after.index(a) > after.index(b)]
    if not swapped:
        return f"Tuning keeps the order of {label}."
    parts = []
    for a, b in swapped:  # a was above b before, b is above a after tuning
        gap = difference(methods[b]["tuned"], methods[a]["tuned"])
        verdict = "resolved" if gap.resolved else "not resolved by the seeds"
        parts.append(f"{names[b]} now above {names[a]} ({signed(gap)}, {verdict})")
    return f"Against {label}, tuning swaps {len(swapped)} of {len(before) * (len(before) - 1) // 2} pairs: " + \
        "; ".join(parts) + "."


def reading(data: dict[str, Any], gains: dict[str, Interval]) -> list[str]:
    """What the budget can and cannot resolve, computed from the numbers."""
    s, methods = data["settings"], data["methods"]
    names = {stem: methods[stem]["name"] for stem in methods}
    seeds = s["reproductions"]
    lines = ["## What this budget can and cannot resolve", ""]
    if seeds < 2:
        return [*lines, "One seed per configuration: no interval can be computed, so nothing is resolved."]
    halves = [interval(m["tuned"]).half_width for m in methods.values()]
    known = [h for h in halves if h is not None]
    resolved = [stem for stem, gain in gains.items() if gain.resolved]
    pairs = list(combinations(methods, 2))
    apart = [(a, b) for a, b in pairs if difference(methods[a]["tuned"], methods[b]["tuned"]).resolved]
    overlapping = [(a, b) for a, b in pairs if overlap(methods[a]["tuned"], methods[b]["tuned"])]
    budget = s["trials"] * data["protocol"]["folds"] * s["epochs"]
    trained = [m["fold_epochs"] for m in methods.values()]
    text = (f"Each test mean rests on {seeds} seeds, so its 95% interval uses t = "
            f"{t_quantile(seeds - 1):.2f} ({seeds - 1} df)")
    if known:
        text += f"; the tuned means' half-widths range from {format_value(min(known))} to {format_value(max(known))}"
    text += (". **Tuning against the untuned recipe**: "
             + (f"{len(resolved)} of {len(gains)} differences exclude zero ("
                + ", ".join(f"{names[s_]} {gains[s_].estimate:+.4f}" for s_ in resolved) + ")"
                if resolved else f"none of the {len(gains)} differences excludes zero")
             + (f"; not resolved: {', '.join(names[s_] for s_ in gains if s_ not in resolved)}"
                if len(resolved) < len(gains) else "") + ". ")
    text += (f"**Between tuned methods**: {len(overlapping)} of {len(pairs)} pairs have overlapping 95% intervals "
             f"of their means, and {len(apart)} of {len(pairs)} Welch differences exclude zero")
    close = [(a, b) for a, b in pairs if (a, b) not in apart]
    if close:
        text += ("; the seeds cannot order " + ", ".join(f"{names[a]} and {names[b]}" for a, b in close))
    text += (". Overlapping intervals do not show that two methods are equal: with this many seeds only "
             "differences several times the seed spread are resolved, and a difference that is not resolved is "
             "one the budget cannot tell. ")
    spent = f"{min(trained)}" + (f"–{max(trained)}" if max(trained) != min(trained) else "")
    text += (f"**The search itself**: every method got at most {budget} fold-epochs and trained {spent} (pruning "
             "stops trials early). The best cross-validated score is the maximum over "
             f"{plural(s['trials'], 'noisy estimate')}, optimistic by construction, and it is measured on other "
             "classes (folds of the training classes) than the test; only the test columns compare methods. "
             f"{plural(s['trials'], 'trial')} of a {max(len(m['space']) for m in methods.values())}-parameter "
             "space explore it coarsely")
    if data["protocol"]["sampler"] == "tpe":
        startup = data["protocol"]["tpe_startup_trials"]
        if s["trials"] <= startup:
            text += (f" — and TPE draws its first {plural(startup, 'trial')} at random, so with "
                     f"{plural(s['trials'], 'trial')} every search here is a random search")
        else:
            text += (f" — and TPE draws its first {plural(startup, 'trial')} at random, so its model chooses only "
                     f"the last {plural(s['trials'] - startup, 'trial')} of each search")
    late = [names[k] for k, m in methods.items()
            if m["best_trial"] is not None and m["best_trial"] >= s["trials"] - max(1, s["trials"] // 4)]
    below = [names[k] for k, gain in gains.items() if gain.estimate < 0]
    if late:
        text += f"; the best trial came in the last quarter of the search for {', '.join(late)}"
    if below:
        text += f"; the tuned configuration tests below the recipe's own for {', '.join(below)}"
    text += (". Where the search was still improving, or the cross-validated winner does not transfer to the "
             "test classes, more trials or seeds would be needed to say more." if late or below else
             ": no method's best trial came late, and no tuned configuration tests below its recipe.")
    return [*lines, text]


def overlap(a: list[float], b: list[float]) -> bool:
    """Whether the 95% intervals of the two means overlap (two single values: whether they are equal)."""
    ia, ib = interval(a), interval(b)
    ha, hb = ia.half_width or 0.0, ib.half_width or 0.0
    return abs(ia.estimate - ib.estimate) <= ha + hb


def commands_section(data: dict[str, Any]) -> list[str]:
    """Every command the study ran, with its wall time and the machine's load."""
    commands = data["commands"]
    total = sum(c["seconds"] for c in commands)
    machine = data["machine"]
    lines = ["## Commands and wall times", "",
             f"{len(commands)} commands, {total / 60:.1f} minutes in all on {machine.get('cpus', '?')} CPUs "
             f"(torch {machine.get('torch', '?')}, CUDA {'yes' if machine.get('cuda') else 'no'}); the load "
             "average is the machine's when the command ended (above the CPU count: other work shared it, so "
             "the time is longer than on a quiet machine).", "",
             "| step | command | seconds | load |", "|---|---|---|---|"]
    for c in commands:
        lines.append(f"| {c['step']} | `{c['command']}` | {c['seconds']:.0f} | {c['load_average']:.2f} |")
    return lines


# -------------------------------------------------------------------------------------------------------- files
def write_page(out: Path, page: Path, oodml_numbers: Path) -> list[Path]:
    """Collect the numbers of ``out``, keep them as ``page``'s ``.json``, render ``page``."""
    from dmlplug.files import write_text

    data = collect(out, oodml_numbers)
    numbers = page.with_suffix(".json")
    write_text(numbers, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    write_text(page, render(data))
    return [page, numbers]


def write_page_from_numbers(page: Path) -> Path:
    """Render ``page`` again from its ``.json``."""
    from dmlplug.files import write_text

    write_text(page, render_from_numbers(page))
    return page


def render_from_numbers(page: Path) -> str:
    """The page as its ``.json`` renders it."""
    return render(json.loads(page.with_suffix(".json").read_text()))

