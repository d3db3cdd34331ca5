"""A pruned trial's fold run is an ordinary run directory that says `pruned` (status and the pruner's reason in
results.json), not `failed`; the trial is pruned in Optuna and its later folds never start."""

import json

from optuna.trial import TrialState
from tiny import registry, write_tiny

import dmlplug
from dmlplug_builtins.tune.tune import tune


class Result:
    selection_metrics = {"map@r": 0.99}


def test_the_pruned_fold_run_says_pruned(tmp_path, single_thread):
    space = write_tiny(tmp_path)
    space.write_text(space.read_text().replace('pruner = "none"', 'pruner = {name = "median", startup_trials = 1}'))
    calls = []

    def runner(recipe, overrides, *, hooks, **options):
        calls.append(options["out"])
        if len(calls) <= 2:  # trial 0: a scripted 0.99 at every step, above anything the tiny recipe reaches
            hooks[0].on_eval_end(None, 1, "val", {"map@r": 0.99})
            return Result()
        return dmlplug.run(recipe, overrides, hooks=hooks, **options)  # trial 1: a real run, pruned at step 1

    study = tune(space, tmp_path / "t", trials=2, registry=registry(), runner=runner, echo=lambda _: None)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.PRUNED]
    fold = tmp_path / "t" / "trials" / "trial-0001" / "fold-0"
    results = json.loads((fold / "results.json").read_text())
    assert results["status"] == "pruned" and "error" not in results
    assert results["reason"].startswith("pruned at fold 0, epoch 1 (running mean ")
    running = study.trials[1].intermediate_values[1]
    assert results["reason"] == f"pruned at fold 0, epoch 1 (running mean {running:.4f})"
    assert not (fold.parent / "fold-1").exists() and len(calls) == 3
