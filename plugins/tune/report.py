"""``dmlplug tune report``: what a search found, as files people look at.

Per tune directory (into ``DIR/report`` or ``--out/<dir name>``): ``best.toml`` (the recipe with the best
configuration, ready for ``dmlplug run``), ``trials.md`` (every trial: state, objective, fold scores,
parameters, why it failed), ``importances.md`` (fANOVA importances of the parameters, when at least two trials
completed), ``history.png`` and ``parallel.png`` (optuna.visualization.matplotlib) and ``tensorboard/`` (the
HParams dashboard: :mod:`.hparams`). Several directories also give ``comparison.md``: one row per search, side by
side.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def load(tune_dir: Path, storage: str | None) -> tuple[dict[str, Any], Any]:
    """The manifest and study of a tune directory (:func:`~dmlplug_builtins.tune.study.load_study`).

    The study is the one the manifest names, and it must be this directory's search: its space identity (the
    space, recipe and ``--set`` overrides, recorded when the study was created) is the manifest's, as ``tune run``
    checks before it adds a trial. A ``--storage`` shared by several searches holds each under its own name; a
    directory whose search lives elsewhere (its journal file, another database) finds another search's study
    there, or none.

    Raises:
        RunError: Not a tune directory, no study in its storage, or the study of another search.
    """
    from dmlplug.errors import RunError
    from dmlplug.secrets import mask_secrets
    from dmlplug_builtins.tune.study import SPACE_ATTR, STUDY, load_study
    from dmlplug_builtins.tune.tune import MANIFEST

    manifest, study = load_study(tune_dir, storage, manifest=MANIFEST, command="tune", study=STUDY)
    if study.user_attrs.get(SPACE_ATTR) != manifest.get("identity"):
        where = mask_secrets(storage) if storage else str(tune_dir / "journal.log")
        raise RunError(f"the study {study.study_name!r} in {where} is not the search of {tune_dir}: it was created "
                       "with another space, recipe or --set overrides than its tune.json records", where=str(tune_dir),
                       fix=f"report {tune_dir} with the storage its search ran on (--storage URL, or none for its "
                           "journal file), in a command of its own if the other directories' storage differs")
    return manifest, study


def trials_table(study: Any) -> str:
    """Markdown table of every trial."""
    names = sorted({k for t in study.trials for k in t.params})
    folds = sorted({k for t in study.trials for k in t.user_attrs if k.startswith("fold_")})
    head = ["trial", "state", "objective", *folds, *names, "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in study.trials:
        cells = [str(t.number), t.state.name.lower(), _num(t.value), *(_num(t.user_attrs.get(f)) for f in folds),
                 *(_num(t.params.get(n)) for n in names), str(t.user_attrs.get("fail_reason", ""))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _num(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def write_one(tune_dir: Path, manifest: dict[str, Any], study: Any, out: Path) -> dict[str, Any]:
    """Write one search's report files into ``out``; returns its row of the comparison.

    ``manifest`` and ``study`` are what :func:`load` read and checked for ``tune_dir``.
    """
    from optuna.trial import TrialState

    import dmlplug
    from dmlplug.files import write_text
    from dmlplug_builtins.tune.hparams import FOLDER as HPARAMS_FOLDER
    from dmlplug_builtins.tune.hparams import write_hparams
    from dmlplug_builtins.tune.trials import toml_value

    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "trials.md", trials_table(study))
    write_hparams(study, out / HPARAMS_FOLDER)
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    row: dict[str, Any] = {"search": tune_dir.name, "trials": len(study.trials), "complete": len(complete),
                           "pruned": len(study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))),
                           "failed": len(study.get_trials(deepcopy=False, states=(TrialState.FAIL,))),
                           "best": None, "test": None}
    if complete:
        best = study.best_trial
        row["best"] = best.value
        overrides = [*manifest["overrides"], *(f"{k}={toml_value(v)}" for k, v in best.params.items())]
        text = dmlplug.validate(manifest["recipe"], overrides).dumps()
        write_text(out / "best.toml", f"# Best configuration of {tune_dir} (trial {best.number}, cross-validated "
                   f"objective {best.value:.4f})\n" + text)
        _figures(study, out)
    if len(complete) >= 2:
        write_text(out / "importances.md", _importances(study))
    summary = tune_dir / "reproductions" / "summary.json"
    if summary.is_file():
        data = json.loads(summary.read_text(encoding="utf-8"))
        row["test"] = f"{data['mean']:.4f} ± {data['half_width']:.4f} ({len(data['scores'])} seeds)"
    return row


def _importances(study: Any) -> str:
    import optuna

    try:
        values = optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError) as exc:  # e.g. a parameter that never varied
        return f"No importances: {exc}\n"
    return "| parameter | importance |\n|---|---|\n" + "".join(f"| {k} | {v:.3f} |\n" for k, v in values.items())


def _figures(study: Any, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    from dmlplug.files import atomic_write

    for name, plot in (("history.png", ovm.plot_optimization_history), ("parallel.png", ovm.plot_parallel_coordinate)):
        axes = plot(study)
        figure: Any = (axes.flat[0] if hasattr(axes, "flat") else axes).figure

        def save(handle: Any, figure: Any = figure) -> None:
            figure.savefig(handle, format="png", dpi=100, bbox_inches="tight")

        atomic_write(out / name, save)
        plt.close(figure)


def write_report(dirs: Sequence[str], *, storage: str | None = None, out: str | None = None) -> str:
    """Write the reports of ``dirs``; returns the text printed (the comparison table).

    Every directory's study is read and checked (:func:`load`) before anything is written, so a report never
    writes into a directory whose study it did not read.

    Raises:
        RunError: A directory is no tune directory, or its study is missing from the storage or another search's.
    """
    import warnings

    from dmlplug.files import write_text

    loaded = [(Path(name), *load(Path(name), storage)) for name in dirs]
    rows = []
    for tune_dir, manifest, study in loaded:
        target = Path(out) / tune_dir.name if out else tune_dir / "report"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # optuna's matplotlib module is marked experimental
            rows.append(write_one(tune_dir, manifest, study, target))
    head = ["search", "trials", "complete", "pruned", "failed", "best", "test"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_num(r[h]) if r[h] is not None else "" for h in head) + " |" for r in rows]
    table = "\n".join(lines) + "\n"
    if len(rows) > 1:
        write_text(Path(out or dirs[0]) / "comparison.md", table)
    return table
