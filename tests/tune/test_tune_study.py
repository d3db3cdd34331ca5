"""A whole search in one process on the embedded glyphs: trials are k ordinary fold runs whose mean is the
objective, a restarted search continues, the best configuration is reproduced on the test classes with a t-based
CI, and the report writes a ready recipe; pruning and failures checked against Optuna's own state."""

import json
import math
import statistics

import optuna
import pytest
from scipy import stats
from tiny import registry, write_tiny

import dmlplug
from dmlplug.plugins import get_host
from dmlplug.tables import validate_table
from dmlplug_builtins.tune.report import load, write_report
from dmlplug_builtins.tune.trials import FoldReporter
from dmlplug_builtins.tune.tune import tune


def results(run_dir):
    return json.loads((run_dir / "results.json").read_text())


def test_search_resume_reproduce_and_report(tmp_path, single_thread):
    space = write_tiny(tmp_path)
    lines = []
    study = tune(space, tmp_path / "t", trials=1, registry=registry(), echo=lines.append)
    assert len(study.trials) == 1 and lines == [f"[1/1] trial 0: complete {study.trials[0].value:.4f}"]
    study = tune(space, tmp_path / "t", trials=1, registry=registry(),
                 echo=lines.append)  # enough trials already: nothing runs
    assert len(study.trials) == 1
    study = tune(space, tmp_path / "t", trials=2, registry=registry(),
                 reproductions=2, echo=lines.append)  # continues with one more
    assert [t.number for t in study.trials] == [0, 1]
    val_classes = []
    for trial in study.trials:
        assert trial.state == optuna.trial.TrialState.COMPLETE
        folds = [results(tmp_path / "t" / "trials" / f"trial-{trial.number:04d}" / f"fold-{i}") for i in range(2)]
        assert all(r["status"] == "completed" and r["selected_on"] == "val" for r in folds)
        scores = [r["selection_metrics"]["map@r"] for r in folds]
        assert trial.value == pytest.approx(statistics.fmean(scores))  # the objective: mean over the folds
        assert [trial.user_attrs["fold_0"], trial.user_attrs["fold_1"]] == scores
        # The per-run hook saw each fold's one trained epoch: steps fold * epochs + epoch, the running fold mean.
        assert trial.intermediate_values == pytest.approx({1: scores[0], 2: statistics.fmean(scores)})
        recipe = (tmp_path / "t" / "trials" / f"trial-{trial.number:04d}" / "fold-1" / "recipe.resolved.toml")
        assert f"lr = {trial.params['optimizer.lr']}" in recipe.read_text()
    for fold in range(2):
        data = json.loads((tmp_path / "t" / "trials" / "trial-0000" / f"fold-{fold}" / "data.json").read_text())
        val_classes.append(set(data["info"]["tune_fold"]["val_classes"]))
    assert val_classes[0].isdisjoint(val_classes[1])
    assert get_host().pm.get_plugin("run-hooks-0") is None  # registered for its run only
    # Reproductions: the plain recipe (all training classes, the test classes) with the best values, seeds 0 and 1.
    fold = json.loads((tmp_path / "t" / "trials" / "trial-0000" / "fold-0" / "data.json").read_text())["splits"]
    for seed in range(2):
        run = tmp_path / "t" / "reproductions" / f"seed-{seed}"
        data = json.loads((run / "data.json").read_text())
        # Trained on every training class (the fold's training plus validation classes), evaluated on the test
        # classes; the plain recipe has no validation split, so its best.pt is the last epoch's model (select_on =
        # "auto"), never selected on a fold's val classes.
        assert data["dataset"] == "glyphs" and "tune_fold" not in data["info"] and set(data["splits"]) == {"train",
                                                                                                            "test"}
        assert data["splits"]["train"]["classes"] == fold["train"]["classes"] + fold["val"]["classes"]
        # The test classes are the recipe's classes outside every fold (a fold's "test" split is its val fold).
        assert fold["test"] == fold["val"]
        assert data["splits"]["test"]["classes"] == 40 - data["splits"]["train"]["classes"] > 0
        assert results(run)["selected_on"] == "last" and results(run)["reported_on"] == "test"
        resolved = (run / "recipe.resolved.toml").read_text()
        assert f"seed = {seed}\n" in resolved and f"lr = {study.best_trial.params['optimizer.lr']}" in resolved
    summary = json.loads((tmp_path / "t" / "reproductions" / "summary.json").read_text())
    scores = [results(tmp_path / "t" / "reproductions" / f"seed-{s}")["metrics"]["map@r"] for s in range(2)]
    half = stats.t.ppf(0.975, 1) * statistics.stdev(scores) / math.sqrt(2)
    assert summary["scores"] == scores and summary["params"] == study.best_trial.params
    assert summary["mean"] == pytest.approx(statistics.fmean(scores)) and summary["half_width"] == pytest.approx(half)
    # The report: the best configuration as a recipe that validates, the trials table, the figures.
    table = write_report([str(tmp_path / "t")])
    report = tmp_path / "t" / "report"
    best = dmlplug.validate(str(report / "best.toml"))
    assert best.recipe.optimizer.lr == pytest.approx(study.best_trial.params["optimizer.lr"])
    assert best.recipe.data.dataset["name"] == "glyphs"  # the plain recipe, not the fold wrapper
    assert (report / "trials.md").read_text().count("| complete |") == 2
    for figure in ("history.png", "parallel.png"):
        assert (report / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"| t | 2 | 2 | 0 | 0 | {study.best_value:.4g} | {summary['mean']:.4f}" in table


def test_fold_reporter_reports_the_running_mean_and_prunes():
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.MedianPruner(n_startup_trials=1))
    first = study.ask()
    for step, value in enumerate([0.5, 0.6, 0.7, 0.8], start=1):
        first.report(value, step)
    study.tell(first, 0.8)
    trial = study.ask()
    # Fold 1 of 2 epochs after fold 0 scored 0.9: epoch 1 reports mean(0.9, 0.8) = 0.85 at step 1*2+1 = 3.
    reporter = FoldReporter(trial, fold=1, epochs=2, metric="map@r", finished=[0.9])
    reporter.on_eval_end(None, 1, "test", {"map@r": 0.0})  # another split: ignored
    reporter.on_eval_end(None, 1, "val", {"map@r": 0.8})  # above the first trial's 0.7 at step 3: goes on
    assert study.trials[1].intermediate_values == {3: pytest.approx(0.85)}
    # After a poor fold 0 (0.2), 0.4 in fold 1 is a running mean of 0.3 at step 3: below the median, pruned.
    pruned = FoldReporter(study.ask(), fold=1, epochs=2, metric="map@r", finished=[0.2])
    with pytest.raises(optuna.TrialPruned, match="fold 1, epoch 1"):
        pruned.on_eval_end(None, 1, "val", {"map@r": 0.4})
    assert study.trials[2].intermediate_values == {3: pytest.approx(0.3)}


def study_with_one_trial(**pruner):
    """A study with the median pruner (these parameters) and one complete trial that reported 0.5, 0.6, 0.7, 0.8 at
    steps 1-4."""
    table = validate_table("tune_pruners", {"name": "median", **pruner}, registry=registry())
    study = optuna.create_study(direction="maximize", pruner=table.build(dmlplug.BuildContext()))
    first = study.ask()
    for step, value in enumerate([0.5, 0.6, 0.7, 0.8], start=1):
        first.report(value, step)
    study.tell(first, 0.8)
    return study


def test_warmup_epochs_keeps_the_pruner_off_until_a_trial_has_trained_them():
    poor = study_with_one_trial(startup_trials=1).ask()
    poor.report(0.0, 1)
    assert poor.should_prune()  # by default the first epoch may prune
    warm = study_with_one_trial(startup_trials=1, warmup_epochs=2).ask()
    warm.report(0.0, 1)
    assert not warm.should_prune()
    warm.report(0.0, 2)
    assert warm.should_prune()


def test_prune_at_fold_asks_the_pruner_only_when_a_fold_ends():
    study = study_with_one_trial(startup_trials=1)
    reporter = FoldReporter(study.ask(), fold=0, epochs=2, metric="map@r", finished=[], prune_at="fold")
    reporter.on_eval_end(None, 1, "val", {"map@r": 0.0})  # below the median at step 1, but mid-fold: goes on
    with pytest.raises(optuna.TrialPruned, match="fold 0, epoch 2"):
        reporter.on_eval_end(None, 2, "val", {"map@r": 0.0})
    assert study.trials[1].intermediate_values == {1: 0.0, 2: 0.0}  # every epoch is still reported


def test_a_failing_trial_is_recorded_and_the_study_goes_on(tmp_path):
    space = write_tiny(tmp_path)
    calls = []

    def runner(recipe, overrides, **options):
        calls.append(overrides)
        if len(calls) == 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return dmlplug_result(0.25)

    study = tune(space, tmp_path / "t", trials=2, registry=registry(), runner=runner, echo=lambda _: None)
    states = [t.state for t in study.trials]
    assert states == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.COMPLETE]
    assert study.trials[0].user_attrs["fail_reason"] == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert study.trials[1].value == 0.25
    assert load(tmp_path / "t", None)[1].trials[0].state == optuna.trial.TrialState.FAIL


def dmlplug_result(value):
    """What dmlplug.run returns, as far as a trial reads it."""
    class Result:
        selection_metrics = {"map@r": value}

    return Result()


def test_the_grid_sampler_visits_every_combination_once(tmp_path):
    space = write_tiny(tmp_path)
    space.write_text(space.read_text().replace('sampler = "random"', 'sampler = "grid"').split('[params.')[0] + """
[params."loss.alpha"]
type = "categorical"
choices = [1.0, 2.0, 3.0]
[params."data.sampler.m"]
type = "categorical"
choices = [2, 4]
""")
    study = tune(space, tmp_path / "t", trials=50, registry=registry(),
                 runner=lambda *a, **k: dmlplug_result(0.5), echo=lambda _: None)
    combinations = sorted((t.params["loss.alpha"], t.params["data.sampler.m"]) for t in study.trials)
    assert combinations == [(a, m) for a in (1.0, 2.0, 3.0) for m in (2, 4)]


def test_report_puts_several_searches_side_by_side(tmp_path):
    space = write_tiny(tmp_path)
    for name, value in (("ms", 0.4), ("arc", 0.6)):
        scores = iter([value, value + 0.1, value + 0.2, value + 0.3] * 3)
        tune(space, tmp_path / name, trials=3, registry=registry(),
             runner=lambda *a, s=scores, **k: dmlplug_result(next(s)),
             echo=lambda _: None)
    table = write_report([str(tmp_path / "ms"), str(tmp_path / "arc")], out=str(tmp_path / "cmp"))
    rows = [line for line in table.splitlines() if line.startswith("| ms") or line.startswith("| arc")]
    # Each trial's objective is the mean of its two folds: 0.45, 0.65, 0.45 (ms) and 0.65, 0.85, 0.65 (arc).
    assert rows == ["| ms | 3 | 3 | 0 | 0 | 0.65 |  |", "| arc | 3 | 3 | 0 | 0 | 0.85 |  |"]
    assert (tmp_path / "cmp" / "comparison.md").read_text() == table
    for name in ("ms", "arc"):
        assert (tmp_path / "cmp" / name / "importances.md").read_text().startswith("| parameter | importance |")
        assert (tmp_path / "cmp" / name / "best.toml").is_file()
