"""``dmlplug sweep report``: per configuration, each metric's mean ± t-based 95% CI over the seeds.

Everything is read from the study (the journal file of the sweep directory or ``--storage``), where each cell's
trial holds its run's final metrics (``metric:NAME`` attributes): a sweep whose runs were trained on several
machines is reported from any of them. Files, into ``SWEEP_DIR/report`` (or ``--out``): ``sweep.md`` (the
table) and ``best.toml`` (the recipe with the best configuration by the sweep's metric, ready for ``dmlplug
run``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def load(sweep_dir: Path, storage: str | None) -> tuple[dict[str, Any], Any]:
    """The manifest and study of a sweep directory (:func:`~dmlplug_builtins.tune.study.load_study`).

    Raises:
        RunError: Not a ``dmlplug sweep`` directory, or no study in its storage.
    """
    from dmlplug_builtins.tune.study import load_study
    from dmlplug_builtins.tune.sweep import FORMAT, MANIFEST, STUDY

    return load_study(sweep_dir, storage, manifest=MANIFEST, command="sweep", study=STUDY, format=FORMAT)


def rows(study: Any) -> list[dict[str, Any]]:
    """One row per configuration: its values, seeds complete/failed/pending, and each metric's mean ± CI."""
    from optuna.trial import TrialState

    from dmlplug_builtins.tune.grid import METRIC_PREFIX, VALUES_ATTR, outcomes
    from dmlplug_builtins.tune.sweep import SEED_KEY, slug
    from dmlplug_builtins.tune.tune import mean_ci

    groups: dict[str, dict[str, Any]] = {}
    for trial in outcomes(study.get_trials(deepcopy=False)).values():
        values = dict(trial.user_attrs.get(VALUES_ATTR, {}))
        seed = values.pop(SEED_KEY, None)
        row = groups.setdefault(slug(values), {"config": values, "complete": [], "failed": [], "pending": [],
                                               "scores": {}})
        if trial.state == TrialState.COMPLETE:
            row["complete"].append(seed)
            for key, value in trial.user_attrs.items():
                if key.startswith(METRIC_PREFIX):
                    row["scores"].setdefault(key.removeprefix(METRIC_PREFIX), []).append(float(value))
        elif trial.state == TrialState.FAIL:
            row["failed"].append(seed)
        else:
            row["pending"].append(seed)
    for row in groups.values():
        row["metrics"] = {name: mean_ci(scores) for name, scores in row["scores"].items()
                          if all(math.isfinite(s) for s in scores)}
    return [groups[name] for name in sorted(groups)]


def best_row(table: list[dict[str, Any]], metric: str, mode: str) -> dict[str, Any] | None:
    """The configuration with the best mean of ``metric`` (``mode`` max or min), or None when none has it."""
    scored = [r for r in table if metric in r["metrics"]]
    if not scored:
        return None
    sign = 1.0 if mode == "max" else -1.0
    return max(scored, key=lambda r: sign * r["metrics"][metric]["mean"])


def markdown(table: list[dict[str, Any]], metric: str) -> str:
    """The table: configuration, seeds complete/failed/pending, each metric's mean ± half width (ranking first)."""
    names = sorted({n for r in table for n in r["metrics"]}, key=lambda n: (n != metric, n))
    head = ["configuration", "complete", "failed", "pending", *names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in table:
        config = ", ".join(f"{k}={v}" for k, v in row["config"].items()) or "(the recipe as written)"
        cells = [config, str(len(row["complete"])), str(len(row["failed"])), str(len(row["pending"]))]
        for name in names:
            stat = row["metrics"].get(name)
            cells.append(f"{stat['mean']:.4f} ± {stat['half_width']:.4f}" if stat else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(sweep_dir: str, *, storage: str | None = None, out: str | None = None) -> str:
    """Write ``sweep.md`` and ``best.toml``; returns the text printed."""
    import dmlplug
    from dmlplug.files import write_text
    from dmlplug_builtins.tune.trials import toml_value

    directory = Path(sweep_dir)
    manifest, study = load(directory, storage)
    target = Path(out) if out else directory / "report"
    table = rows(study)
    metric = manifest["metric"]
    text = markdown(table, metric)
    notes = [f"mean ± half width of the t-based 95% confidence interval over the completed seeds; "
             f"configurations ranked by {metric} ({manifest['mode']})"]
    best = best_row(table, metric, manifest["mode"])
    target.mkdir(parents=True, exist_ok=True)
    if best is not None:
        overrides = [*manifest["overrides"], *(f"{k}={toml_value(v)}" for k, v in best["config"].items())]
        recipe = dmlplug.validate(manifest["recipe"], overrides).dumps()
        stat = best["metrics"][metric]
        write_text(target / "best.toml", f"# Best configuration of the sweep {directory}: {metric} = "
                   f"{stat['mean']:.4f} ± {stat['half_width']:.4f} over {len(best['complete'])} seeds\n" + recipe)
        config = ", ".join(f"{k}={v}" for k, v in best["config"].items()) or "(the recipe as written)"
        notes.append(f"best: {config} -> {target / 'best.toml'}")
    write_text(target / "sweep.md", f"# Sweep {directory}\n\n{text}\n" + "".join(f"{n}\n" for n in notes))
    return text + "\n".join(notes) + f"\nwrote {target / 'sweep.md'}"
