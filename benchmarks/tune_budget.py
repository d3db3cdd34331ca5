"""TPE with median pruning against random search without pruning, on the same budget in trial-epochs.

The question of issue #28 ("Measured"): how many epochs of training does Bayesian optimisation with pruning need
to reach the best cross-validated score that plain random search reaches with the whole budget? Each arm runs
``dmlplug tune`` studies (:func:`dmlplug_builtins.tune.tune.tune`, in a temporary directory, one study per arm
and seed) of the same space file and recipe until the study has spent the budget, counted in **trial-epochs**:
the epochs trained over all folds of all trials, read from the fold run directories' ``metrics.jsonl`` (one
validation evaluation per trained epoch; a pruned fold counts the epochs it trained). Only the sampler, its
seed and the pruner differ between the arms:

- ``tpe``: TPE and the median pruner over the running fold mean, asked after every epoch (the ``startup_trials``
  of the space's sampler and pruner);
- ``tpe-fold``: the same, but the pruner is asked only when a fold ends (``prune_at = "fold"``): every trial
  trains its first fold, and trials are compared on whole folds' scores;
- ``tpe-fold-p25``: the same at fold ends, but the percentile pruner at 25: only trials in the bottom quarter stop;
- ``tpe-none``: TPE without a pruner, to tell what the sampler does from what the pruner does;
- ``hyperband``: random search with the Hyperband pruner of ``examples/dmlplug-example-retrieval``
  (``example_hyperband``: Optuna's ``HyperbandPruner``, successive halving in brackets, Li et al. 2018) over
  trial-epochs, from 1 trial-epoch up to a whole trial, reduction factor 3: the same draws as ``random``, seed
  for seed, with the poor ones stopped early (the plugin is loaded from that folder when it is not installed);
- ``random``: ``sampler = "random"``, ``pruner = "none"``: every trial trains every fold to the end.

A trial's objective counts from the epoch count at which it finished; a trial that would finish beyond the
budget is not counted (the study stops once the budget is spent, so at most one trial overshoots). Prints per
arm and seed the best-so-far curve (best objective against trial-epochs spent), then the headline on the mean
curve over the seeds, for each TPE arm: the epochs it needed to reach random search's final best, as a fraction
of the budget, and the other way round, plus the same per seed (seed ``s`` of one arm against seed ``s`` of the
other), and what the seeds resolve: the mean paired difference of the final bests with its t-based 95% interval.
With ``--baseline-factor 2`` random search runs on twice the budget (its first ``budget`` trial-epochs are the
same trials as a run on the budget alone: seeded trials draw from seeds of their own), and each arm is also
compared with random search's best at twice its budget, the comparison of the Hyperband paper.
(Issue #28's target of 40% fewer epochs for TPE with median pruning is withdrawn: docs/tune.md.)

Every run is single-threaded (``torch.set_num_threads(1)``) so that ``--jobs`` studies share a small CPU
without oversubscribing it; the numbers are epochs, not seconds, and do not depend on the machine's load.

Example::

    python benchmarks/tune_budget.py                      # 3 seeds per arm, 128 trial-epochs each, 2 jobs
    python benchmarks/tune_budget.py --seeds 0 1 2 3 4 --budget 160 --keep /tmp/tune-budget
    python benchmarks/tune_budget.py --arms tpe-fold random   # only these arms
    python benchmarks/tune_budget.py --arms hyperband --baseline-factor 2 --budget 256   # random search at 1x and 2x
    python benchmarks/tune_budget.py --quick              # a smoke run (seconds): tiny data, 1 seed
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPACE = ROOT / "recipes" / "tune" / "budget.space.toml"
ARMS = {"tpe": {"sampler": "tpe", "pruner": "median", "prune_at": "epoch"},
        "tpe-fold": {"sampler": "tpe", "pruner": "median", "prune_at": "fold"},
        "tpe-fold-p25": {"sampler": "tpe", "pruner": {"name": "percentile", "percentile": 25.0}, "prune_at": "fold"},
        "tpe-none": {"sampler": "tpe", "pruner": "none"},
        "hyperband": {"sampler": "random", "plugin": "dmlplug_example_retrieval",
                      "pruner": {"name": "example_hyperband", "min_resource": 1, "max_resource": "trial",
                                 "reduction_factor": 3}},
        "random": {"sampler": "random", "pruner": "none"}}
#: Where an arm's plugin is found when it is not installed (the repository's example distributions).
PLUGIN_FOLDERS = {"dmlplug_example_retrieval": ROOT / "examples" / "dmlplug-example-retrieval"}
#: The built-in samplers and pruners without parameters (the space file's do not apply to them).
BARE = ("random", "none")
#: The arm every other arm is measured against.
BASELINE = "random"
#: What --quick changes: a few images of a few classes, 1 epoch, a budget of two full trials.
QUICK_SET = ["run.epochs=1", "data.dataset.num_classes=28", "data.dataset.images_per_class=4",
             "data.batch_size=8", "data.sampler.m=2"]
QUICK_BUDGET = 4


def arm_registry(arm: str) -> Any:
    """The registry an arm's space is read with: the process's plugins, and the arm's own plugin if it names one."""
    from dmlplug.plugins import get_host

    plugin = ARMS[arm].get("plugin")
    if plugin is None:
        return get_host().registry
    import importlib.util

    from dmlplug.testing import load_host

    if importlib.util.find_spec(plugin) is None:  # not installed: the example distribution's folder
        sys.path.insert(0, str(PLUGIN_FOLDERS[plugin]))
    return load_host(plugin).registry


def arm_space(space: Path, arm: str, seed: int, folder: Path, quick: bool, overrides: Sequence[str] = ()) -> Path:
    """A copy of ``space`` for one arm and seed (sampler, seed, pruner replaced; the recipe path absolute).

    The arm's sampler and pruner keep the parameters the space file gives its own (TPE's and the pruner's
    ``startup_trials``), unless they take none or come from a plugin (Hyperband takes parameters of its own);
    a ``max_resource`` of ``"trial"`` is a whole trial's trial-epochs (folds x the recipe's epochs, with
    ``overrides``).
    """
    import tomli_w

    raw = tomllib.loads(space.read_text(encoding="utf-8"))
    raw["recipe"] = str((space.parent / raw["recipe"]).resolve())
    settings = raw.setdefault("tune", {})
    for key in ("sampler", "pruner"):
        given, chosen = settings.get(key), ARMS[arm][key]
        table = {"name": chosen} if isinstance(chosen, str) else dict(chosen)
        kept = {k: v for k, v in given.items() if k != "name"} if isinstance(given, dict) else {}
        # a plugin's component (Hyperband) takes parameters of its own, not the built-ins' start-up trials
        settings[key] = table if table["name"] in BARE or "plugin" in ARMS[arm] else {**kept, **table}
    if settings["pruner"].get("max_resource") == "trial":
        import dmlplug

        epochs = dmlplug.validate(raw["recipe"], list(overrides)).recipe.run.epochs
        settings["pruner"]["max_resource"] = (2 if quick else int(settings.get("folds", 4))) * int(epochs)
    settings.update({k: v for k, v in ARMS[arm].items() if k not in ("sampler", "pruner", "plugin")},
                    sampler_seed=seed)
    if quick:
        # 28 classes give about 14 training classes: 2 folds; m is fixed at 2 (QUICK_SET) for batches of 8
        settings["folds"] = 2
        if settings["pruner"]["name"] in ("median", "percentile"):
            settings["pruner"]["startup_trials"] = 1
        raw["params"].pop("data.sampler.m", None)
    path = folder / f"{arm}-{seed}.space.toml"
    path.write_text(tomli_w.dumps(raw), encoding="utf-8")
    return path


def trial_epochs(tune_dir: Path, number: int) -> int:
    """Epochs trained by trial ``number``: each fold's trained epochs, one validation evaluation each."""
    total = 0
    for fold in sorted((tune_dir / "trials" / f"trial-{number:04d}").glob("fold-*")):
        lines = (fold / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if (
            fold / "metrics.jsonl").is_file() else []
        epochs = {row["epoch"] for row in map(json.loads, lines) if row.get("split") == "val" and row["epoch"] >= 1}
        total += max(epochs, default=0)
    return total


class BudgetSpent(BaseException):
    """Raised by the benchmark's runner to end a study: not an ``Exception``, so no trial records it as failed."""


def spent_epochs(tune_dir: Path) -> int:
    """Trial-epochs spent so far in ``tune_dir``: every fold run's trained epochs."""
    return sum(trial_epochs(tune_dir, int(t.name.removeprefix("trial-")))
               for t in (tune_dir / "trials").glob("trial-*"))


def run_study(arm: str, seed: int, space: str, budget: int, folder: str, overrides: Sequence[str],
              quick: bool) -> dict:
    """Trials of one arm and seed until ``budget`` trial-epochs are spent; returns the trials in order.

    One ``tune`` call runs the study (one sampler, so the sampler's random stream goes on from trial to trial);
    its runner is :func:`dmlplug.run`, except that a trial's first fold does not start once the budget is
    spent: :class:`BudgetSpent` ends the study there, and that last trial (still running, no epoch trained) is
    not counted.
    """
    import torch

    torch.set_num_threads(1)
    from optuna.trial import TrialState

    import dmlplug
    from dmlplug_builtins.tune.report import load
    from dmlplug_builtins.tune.tune import tune

    tune_dir = Path(folder) / f"{arm}-{seed}"
    copy = arm_space(Path(space), arm, seed, Path(folder), quick, overrides)

    def runner(recipe: Any, run_overrides: Any, **options: Any) -> Any:
        if Path(options["out"]).name == "fold-0" and spent_epochs(tune_dir) >= budget:
            raise BudgetSpent
        return dmlplug.run(recipe, run_overrides, **options)

    started = time.perf_counter()
    with contextlib.suppress(BudgetSpent):
        tune(copy, tune_dir, trials=1_000_000, registry=arm_registry(arm), overrides=list(overrides),
             device="cpu", echo=lambda _: None, runner=runner)
    seconds = time.perf_counter() - started
    spent, rows = 0, []
    for trial in sorted(load(tune_dir, None)[1].trials, key=lambda t: t.number):
        if trial.state == TrialState.RUNNING:  # the trial the budget stopped before it trained
            continue
        epochs = trial_epochs(tune_dir, trial.number)
        spent += epochs
        value = trial.value if trial.state == TrialState.COMPLETE else None
        rows.append({"number": trial.number, "state": trial.state.name.lower(), "value": value, "epochs": epochs,
                     "spent": spent, "params": dict(trial.params)})
    return {"arm": arm, "seed": seed, "trials": rows, "seconds": seconds}


def best_so_far(rows: Sequence[dict], budget: int) -> list[float | None]:
    """Best objective after ``e`` trial-epochs, for ``e = 0 .. budget`` (``None`` before the first complete)."""
    curve: list[float | None] = [None] * (budget + 1)
    for row in rows:
        if row["value"] is None or row["spent"] > budget:
            continue
        for e in range(row["spent"], budget + 1):
            curve[e] = row["value"] if curve[e] is None else max(row["value"], curve[e])  # type: ignore[type-var]
    return curve


def mean_curve(curves: Sequence[Sequence[float | None]]) -> list[float | None]:
    """Mean over seeds at every epoch count; ``None`` until every seed has a value."""
    return [None if any(c[e] is None for c in curves) else statistics.fmean(c[e] for c in curves)  # type: ignore[misc]
            for e in range(len(curves[0]))]


def epochs_to_reach(curve: Sequence[float | None], target: float) -> int | None:
    """The first epoch count at which ``curve`` reaches ``target``; ``None`` if it never does."""
    return next((e for e, v in enumerate(curve) if v is not None and v >= target), None)


def headline(curves: dict[str, list[list[float | None]]], budget: int,
             longer: tuple[int, list[float | None]] | None = None) -> list[str]:
    """For each arm against random search: the epochs each needs to reach the other's final best, on the mean
    curve and per seed, and what the seeds resolve (:func:`resolution`).

    Args:
        curves: Per arm, one best-so-far curve per seed (seeds in the same order in every arm), up to ``budget``.
        budget: The trial-epochs every arm had.
        longer: ``(epochs, random search's final best per seed)`` when random search also ran on a larger budget.
    """
    lines, means = [], {arm: mean_curve(c) for arm, c in curves.items()}
    for tuned in (arm for arm in curves if arm != BASELINE):
        pairs = ((tuned, BASELINE), (BASELINE, tuned))
        for arm, other in pairs:
            target = means[other][budget]
            if target is None:
                lines.append(f"{other} has no complete trial within the budget on some seed: nothing to reach")
                continue
            reached = epochs_to_reach(means[arm], target)
            what = ("never, within the budget" if reached is None else
                    f"{reached} of {budget} trial-epochs ({reached / budget:.0%}; {1 - reached / budget:.0%} fewer)")
            lines.append(f"mean over seeds: {arm} reached {other}'s final best {target:.4f} after {what}")
        for arm, other in pairs:
            per_seed = []
            for mine, theirs in zip(curves[arm], curves[other], strict=True):
                target = theirs[budget]
                reached = None if target is None else epochs_to_reach(mine, target)
                per_seed.append("-" if reached is None else f"{reached / budget:.0%}")
            lines.append(f"per seed: fraction of the budget {arm} needed to reach {other}'s final best "
                         "(- = never): " + " ".join(per_seed))
        finals = [curve[budget] for curve in curves[tuned]]
        lines.append(resolution(f"{tuned} - {BASELINE}, both at {budget}", finals,
                                [curve[budget] for curve in curves[BASELINE]]))
        if longer is not None:
            lines.append(resolution(f"{tuned} at {budget} - {BASELINE} at {longer[0]}", finals, longer[1]))
    return lines


def resolution(what: str, mine: Sequence[float | None], theirs: Sequence[float | None]) -> str:
    """What the seeds resolve of one arm against another: the paired differences of their final bests (seed ``s``
    against seed ``s``), their mean with a t-based 95% confidence interval, how many seeds each side won, and
    whether the interval excludes zero."""
    from dmlplug_builtins.tune.tune import mean_ci

    pairs = [(a, b) for a, b in zip(mine, theirs, strict=True) if a is not None and b is not None]
    if not pairs:
        return f"final best, {what}: no seed has both"
    differences = [a - b for a, b in pairs]
    ci = mean_ci(differences)
    low, high = ci["mean"] - ci["half_width"], ci["mean"] + ci["half_width"]
    verdict = ("one seed: nothing resolved" if len(pairs) < 2 else
               "resolved (the interval excludes 0)" if low > 0 or high < 0 else "not resolved (the interval holds 0)")
    return (f"final best, {what}: {ci['mean']:+.4f} ± {ci['half_width']:.4f} (paired, 95% CI, {len(pairs)} seeds; "
            f"better on {sum(d > 0 for d in differences)}, worse on {sum(d < 0 for d in differences)}): {verdict}")


def report(results: Sequence[dict], budget: int, points: int = 8, factor: int = 1) -> str:
    """The per-study summaries, the best-so-far curves at ``points`` epoch counts and the headline.

    With ``factor`` above 1, random search ran ``factor`` times the budget: its curve and best are read at the
    budget like the other arms', and its final best at the whole of its budget is the headline's second baseline.
    """
    out = ["| arm | seed | trials | complete | pruned | failed | trial-epochs | best | seconds |",
           "|---|---|---|---|---|---|---|---|---|"]
    studies = sorted(results, key=lambda r: (list(ARMS).index(r["arm"]), r["seed"]))
    curves: dict[str, list[list[float | None]]] = {}
    longer: list[float | None] = []
    for result in studies:
        rows = result["trials"]
        own = budget * factor if result["arm"] == BASELINE else budget
        curve = best_so_far(rows, own)
        curves.setdefault(result["arm"], []).append(curve[:budget + 1])
        if result["arm"] == BASELINE:
            longer.append(curve[own])
        counts = {s: sum(1 for r in rows if r["state"] == s) for s in ("complete", "pruned", "fail")}
        out.append(f"| {result['arm']} | {result['seed']} | {len(rows)} | {counts['complete']} | {counts['pruned']} "
                   f"| {counts['fail']} | {rows[-1]['spent']} | {_num(curve[own])} | {result['seconds']:.0f} |")
    marks = sorted({max(1, round(budget * i / points)) for i in range(1, points + 1)})
    names = " | ".join(f"{r['arm']} s{r['seed']}" for r in studies)
    means = {arm: mean_curve(c) for arm, c in curves.items()}
    out += ["", "best cross-validated objective so far, against trial-epochs spent:", "",
            f"| trial-epochs | {names} | " + " | ".join(f"{arm} mean" for arm in means) + " |",
            "|---|" + "---|" * (len(studies) + len(means))]
    for e in marks:
        cells = [_num(best_so_far(r["trials"], budget)[e]) for r in studies]
        out.append(f"| {e} | " + " | ".join(cells) + " | " + " | ".join(_num(m[e]) for m in means.values()) + " |")
    return "\n".join([*out, "", *headline(curves, budget, (budget * factor, longer) if factor > 1 else None)])


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _progress(result: dict, started: float, budget: int) -> dict:
    rows = result["trials"]
    print(f"[{time.perf_counter() - started:.0f} s] {result['arm']} seed {result['seed']}: {len(rows)} trials, "
          f"{rows[-1]['spent']} trial-epochs, best within the budget {_num(best_so_far(rows, budget)[budget])}",
          file=sys.stderr, flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", type=Path, default=SPACE, help="the space file (its [tune] sampler and pruner "
                        "are replaced per arm)")
    parser.add_argument("--budget", type=int, default=None, help="trial-epochs per study (default 128)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="sampler seeds (default 0 1 2)")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS),
                        help=f"the arms to run (default all; {BASELINE} is always run, as the baseline)")
    parser.add_argument("--baseline-factor", type=int, default=1, help="random search runs this many times the "
                        "budget, and every arm is also compared with its best there (default 1)")
    parser.add_argument("--jobs", type=int, default=2, help="studies run at once, one process each")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="recipe override for "
                        "every run (section.key=value, repeatable)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the tune directories here")
    parser.add_argument("--json", type=Path, default=None, help="also write every trial as JSON here (after every "
                        "study)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny data, 1 seed, a tiny budget")
    parser.add_argument("--report", type=Path, default=None, help="print the report of a --json file and stop "
                        "(the seeds every arm finished, when the run was stopped early)")
    args = parser.parse_args(argv)
    if args.report:
        print(report_saved(args.report))
        return 0
    budget = args.budget or (QUICK_BUDGET if args.quick else 128)
    seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    overrides = [*(QUICK_SET if args.quick else []), *args.overrides]
    with tempfile.TemporaryDirectory(prefix="tune-budget-") as temporary:
        folder = args.keep or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        # seed by seed, so that a run stopped early has whole seeds (random search first: the longest study)
        jobs = [(arm, seed, str(args.space), budget * (args.baseline_factor if arm == BASELINE else 1), str(folder),
                 overrides, args.quick) for seed in seeds for arm in (BASELINE, *(a for a in ARMS if a != BASELINE))
                if arm in args.arms or arm == BASELINE]
        started = time.perf_counter()
        results: list[dict] = []

        def done(result: dict) -> None:
            results.append(_progress(result, started, budget))
            if args.json:  # after every study: a run stopped early can still be reported (--report)
                args.json.write_text(json.dumps({"budget": budget, "baseline_factor": args.baseline_factor,
                                                 "results": results}, indent=1), encoding="utf-8")

        if args.jobs <= 1:
            for job in jobs:
                done(run_study(*job))
        else:
            import multiprocessing

            with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
                for future in as_completed([pool.submit(run_study, *job) for job in jobs]):
                    done(future.result())
        print(f"space {args.space}, budget {budget} trial-epochs per study"
              + (f" ({BASELINE}: {budget * args.baseline_factor})" if args.baseline_factor > 1 else "")
              + f", seeds {seeds}, overrides {overrides}; "
              f"{time.perf_counter() - started:.0f} s wall with {args.jobs} job(s)\n")
        print(report(results, budget, factor=args.baseline_factor))
    return 0


def report_saved(path: Path) -> str:
    """The report of a ``--json`` file, over the seeds whose every arm finished (a run stopped early has some)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    arms = {r["arm"] for r in data["results"]}
    whole = sorted(seed for seed in {r["seed"] for r in data["results"]}
                   if {r["arm"] for r in data["results"] if r["seed"] == seed} == arms)
    kept = [r for r in data["results"] if r["seed"] in whole]
    return (f"{path}: seeds {whole} (every arm finished), budget {data['budget']} trial-epochs per study\n\n"
            + report(kept, data["budget"], factor=data.get("baseline_factor", 1)))


if __name__ == "__main__":
    sys.exit(main())
