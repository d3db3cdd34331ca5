"""Collecting the glyph ooDML study's numbers from its directory: the sweeps, the few-shot runs, the protocol.

``collect`` reads what ``studies/glyphs_oodml.py run`` wrote, through the functions ``dmlplug oodml summarize``
and ``dmlplug fewshot`` use, so no number on the page is typed by hand. What it returns is kept beside the page
as JSON, and :mod:`glyphs_oodml_page` renders the page from that alone.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from glyphs_oodml import LOG, METHODS, fewshot_run, most_shifted_split

from dmlplug_builtins.oodml.summary import summarize_sweep

#: The metrics of the table, the AGS and the figure.
METRICS = ("recall@1", "map@1000")


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
            # Whether the untrained model was evaluated (and so a candidate for the few-shot base's best epoch).
            "initial_evaluation": bool(recipe.get("evaluation", {}).get("initial", True)),
            "backbone": recipe["backbone"].get("model", recipe["backbone"]["name"]),
            "embedding_size": head.get("embedding_size") or sum(head["heads"].values()),
            "overrides": settings["overrides"]}


def extractor_families(study: Path) -> list[str]:
    """The glyph families the split-generation extractor trained on (its run's resolved recipe)."""
    recipe = tomllib.loads((study / "extractor" / "recipe.resolved.toml").read_text())
    return recipe["data"]["dataset"]["families"]
