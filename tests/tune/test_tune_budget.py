"""benchmarks/tune_budget.py: its best-so-far curves and headline against hand-computed answers, and a --quick
run end to end (real studies, real fold runs) whose counts are checked against the run directories and Optuna."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("tune_budget", ROOT / "benchmarks" / "tune_budget.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(*trials):
    """Rows as run_study makes them from (epochs, value or None)."""
    out, spent = [], 0
    for epochs, value in trials:
        spent += epochs
        out.append({"value": value, "epochs": epochs, "spent": spent, "state": "complete" if value else "pruned"})
    return out


def test_best_so_far_counts_a_trial_when_it_finished_and_never_past_the_budget(bench):
    curve = bench.best_so_far(rows((4, 0.2), (1, None), (4, 0.5), (4, 0.3), (4, 0.9)), budget=14)
    # finished at 4 (0.2), 5 (pruned), 9 (0.5), 13 (0.3: not better); the 0.9 finished at 17 > 14: not counted
    assert curve == [None] * 4 + [0.2] * 5 + [0.5] * 6


def test_mean_curve_and_epochs_to_reach(bench):
    mean = bench.mean_curve([[None, 0.2, 0.4], [0.1, 0.1, 0.6]])
    assert mean == [None, pytest.approx(0.15), pytest.approx(0.5)]
    assert bench.epochs_to_reach(mean, 0.15) == 1 and bench.epochs_to_reach(mean, 0.5) == 2
    assert bench.epochs_to_reach(mean, 0.51) is None


def test_headline_compares_each_arm_with_the_others_final_best(bench):
    budget = 10
    tpe = [bench.best_so_far(rows((2, 0.5), (2, 0.7)), budget), bench.best_so_far(rows((3, 0.6), (3, 0.8)), budget)]
    rnd = [bench.best_so_far(rows((5, 0.6), (5, 0.65)), budget), bench.best_so_far(rows((5, 0.4), (5, 0.7)), budget)]
    lines = bench.headline({"tpe": tpe, "random": rnd}, budget)
    # random's final mean (0.65 + 0.7) / 2 = 0.675; tpe's mean is 0.55 at 3, 0.65 at 4, 0.75 from 6 on: 6 epochs
    assert lines[0] == "mean over seeds: tpe reached random's final best 0.6750 after 6 of 10 trial-epochs (60%; 40% " \
                       "fewer)"
    # tpe's final mean 0.75 is above every point of random's mean curve
    assert lines[1] == "mean over seeds: random reached tpe's final best 0.7500 after never, within the budget"
    # per seed: tpe s0 reaches 0.65 at 4 (40%), s1 reaches 0.7 at 6 (60%); random s0 never reaches 0.7, s1 never 0.8
    assert lines[2].endswith(": 40% 60%") and lines[3].endswith(": - -")
    # what the seeds resolve: differences 0.7 - 0.65 and 0.8 - 0.7, mean 0.075, t(0.975, 1) * 0.025 = 0.3177
    assert lines[4] == "final best, tpe - random, both at 10: +0.0750 ± 0.3177 (paired, 95% CI, 2 seeds; better on " \
                       "2, worse on 0): not resolved (the interval holds 0)"
    lines = bench.headline({"tpe": rnd, "random": tpe}, budget)  # the arms swapped: 0.675 never reaches 0.75
    assert "never" in lines[0] and "after 6 of 10" in lines[1] and lines[4].startswith("final best, tpe - random, "
                                                                                       "both at 10: -0.0750 ± 0.3177")
    # random search on twice the budget: its best there (0.9 and 0.85 on the two seeds) is the second baseline;
    # differences -0.2 and -0.05: mean -0.125, t(0.975, 1) * 0.075 = 0.9530
    lines = bench.headline({"tpe": tpe, "random": rnd}, budget, longer=(20, [0.9, 0.85]))
    assert lines[5].startswith("final best, tpe at 10 - random at 20: -0.1250 ± 0.9530 (paired, 95% CI, 2 seeds; "
                               "better on 0, worse on 2)")


def test_resolution_says_whether_the_interval_excludes_zero(bench):
    # differences 0.1, 0.12, 0.11: mean 0.11, sd 0.01, t(0.975, 2) * 0.01 / sqrt(3) = 0.0248
    assert bench.resolution("a - b", [0.6, 0.62, 0.61], [0.5, 0.5, 0.5]).endswith(
        "+0.1100 ± 0.0248 (paired, 95% CI, 3 seeds; better on 3, worse on 0): resolved (the interval excludes 0)")
    assert bench.resolution("a - b", [0.6], [0.5]).endswith("1 seeds; better on 1, worse on 0): one seed: nothing "
                                                           "resolved")


def test_every_arm_is_a_valid_space_with_its_settings(bench, tmp_path):
    from dmlplug_builtins.tune.space import load_space

    for arm, settings in bench.ARMS.items():
        # an arm's pruner may come from a plugin (Hyperband: the retrieval example, loaded from its folder)
        space = load_space(bench.arm_space(bench.SPACE, arm, 3, tmp_path, quick=False),
                           registry=bench.arm_registry(arm))
        chosen = space.settings
        assert chosen.prune_at == settings.get("prune_at", "epoch")
        for key in ("sampler", "pruner"):
            wanted = settings[key] if isinstance(settings[key], dict) else {"name": settings[key]}
            # max_resource "trial" is a whole trial: 2 folds x 4 epochs of the budget recipe
            wanted = {k: 8 if v == "trial" else v for k, v in wanted.items()}
            assert wanted.items() <= getattr(chosen, key).to_dict().items()
        # the space file's start-up trials stay with TPE and with a pruner that takes them
        assert chosen.sampler.to_dict().get("startup_trials", 4) == 4
        assert chosen.pruner.to_dict().get("startup_trials", 4) == 4
        assert chosen.sampler_seed == 3 and space.recipe_path == (bench.SPACE.parent / "budget.toml")


def test_quick_run_end_to_end(bench, tmp_path, capsys, single_thread):
    from optuna.trial import TrialState

    from dmlplug_builtins.tune.report import load

    arguments = ["--quick", "--arms", "tpe", "tpe-fold", "--jobs", "1", "--keep", str(tmp_path), "--json",
                 str(tmp_path / "all.json")]
    assert bench.main(arguments) == 0  # random search, the baseline, runs without being named
    printed = capsys.readouterr().out
    data = json.loads((tmp_path / "all.json").read_text())
    budget = data["budget"]
    assert {(r["arm"], r["seed"]) for r in data["results"]} == {("tpe", 0), ("tpe-fold", 0), ("random", 0)}
    for result in data["results"]:
        tune_dir = tmp_path / f"{result['arm']}-{result['seed']}"
        study = load(tune_dir, None)[1]
        trials = {t.number: t for t in study.trials}
        spent = 0
        for row in result["trials"]:
            trial = trials[row["number"]]
            assert row["state"] == trial.state.name.lower() and row["params"] == trial.params
            # the epochs are the fold runs' val evaluations, one per trained epoch
            folds = sorted((tune_dir / "trials" / f"trial-{trial.number:04d}").glob("fold-*"))
            trained = sum(max(json.loads(line)["epoch"] for line in (f / "metrics.jsonl").read_text().splitlines())
                          for f in folds)
            assert row["epochs"] == trained > 0
            spent += trained
            assert row["spent"] == spent
            if trial.state == TrialState.COMPLETE:
                assert row["value"] == trial.value and row["epochs"] == 2 * 1  # 2 folds x 1 epoch (--quick)
        # the study stops at the first trial that starts with the budget spent; none of it was trained
        assert spent >= budget and spent - result["trials"][-1]["epochs"] < budget
        stopped = [t for t in study.trials if t.state == TrialState.RUNNING]
        assert len(stopped) == 1 and not (tune_dir / "trials" / f"trial-{stopped[0].number:04d}" / "fold-0").exists()
        if result["arm"] == "random":
            assert all(r["state"] == "complete" for r in result["trials"])  # no pruner
    for arm in ("tpe", "tpe-fold"):
        assert f"mean over seeds: {arm} reached random's final best" in printed
    assert f"budget {budget} trial-epochs per study" in printed
