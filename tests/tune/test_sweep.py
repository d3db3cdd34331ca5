"""``dmlplug sweep`` in one process: the grid (file, --grid, conditions, seeds) checked against the recipe before
anything is written, each (configuration, seed) one run in ``runs/<configuration>/seed-S``, a rerun that trains
nothing twice, a failed run recorded, and the report's mean ± t-based 95% CI against a direct computation."""

import json
import math
import os
import statistics
import subprocess
import sys

import optuna
import pytest
from scipy import stats
from tiny import RECIPE

import dmlplug
from dmlplug.errors import RecipeError
from dmlplug_builtins.tune.grid import CELL_ATTR, outcomes
from dmlplug_builtins.tune.sweep import load_grid, parse_grid, slug, sweep
from dmlplug_builtins.tune.sweep_report import load, write_report

SWEEP = """
recipe = "recipe.toml"
[sweep]
seeds = [0, 1, 2]
[params."loss.alpha"]
type = "categorical"
choices = [1.0, 2.0]
"""


def write(folder, text=SWEEP, recipe=RECIPE):
    (folder / "recipe.toml").write_text(recipe)
    (folder / "tiny.sweep.toml").write_text(text)
    return folder / "tiny.sweep.toml"


class Result:
    """What dmlplug.run returns, as far as a sweep reads it."""

    def __init__(self, metrics):
        self.metrics = metrics


def fake_runner(calls, scores, fail=()):
    """Records each run, makes its directory, returns the known score of its (alpha, seed)."""

    def runner(recipe, overrides, *, out, device, quiet):
        values = dict(o.split("=", 1) for o in overrides)
        key = (float(values.get("loss.alpha", 0)), int(values["run.seed"]))
        calls.append((key, out))
        out.mkdir(parents=True)
        if key in fail:
            raise RuntimeError("loss is nan at step 3")
        return Result({"map@r": scores[key], "recall@1": 0.5})

    return runner


def test_the_grid_with_conditions_from_the_file_and_the_command_line(tmp_path):
    path = write(tmp_path, SWEEP + """
[params."miner.name"]
type = "categorical"
choices = ["multi_similarity", "triplet_margin"]
[params."miner.epsilon"]
type = "categorical"
choices = [0.05, 0.1]
when = {"miner.name" = "multi_similarity"}
""", recipe=RECIPE + '[miner]\nname = "multi_similarity"\n')
    grid = load_grid(path, ["optimizer.lr=1e-3,1e-2"], seeds="4,5")
    configs = grid.configurations()
    # 2 alphas x (2 epsilons of multi_similarity + triplet_margin without one) x 2 learning rates
    assert len(configs) == 2 * 3 * 2 and len({json.dumps(c, sort_keys=True) for c in configs}) == 12
    assert sum("miner.epsilon" not in c for c in configs) == 4
    assert all(c["miner.name"] == "multi_similarity" for c in configs if "miner.epsilon" in c)
    cells = grid.cells()
    assert len(cells) == 24 and len({c.name for c in cells}) == 24 and grid.seeds == [4, 5]
    first = configs[0]
    assert f"runs/{slug(first)}/seed-4" == cells[0].name and cells[0].values == {**first, "run.seed": 4}
    assert slug({"loss.alpha": 1.0, "optimizer.lr": 0.001}) == "loss.alpha=1.0,optimizer.lr=0.001"
    assert slug({}) == "default" and len(slug({"a": "x" * 300})) < 120
    assert parse_grid(['loss.name=multi_similarity,"contrastive"', "x=[1,2],[3]"]) == {
        "loss.name": ["multi_similarity", "contrastive"], "x": [[1, 2], [3]]}
    assert grid.metric == "map@r" and grid.mode == "max"


@pytest.mark.parametrize(("grid", "message"), [
    (["loss.alpa=1.0,2.0"], "loss.alpa"),  # an unknown key, with its did-you-mean
    (["data.batch_size=1,8"], "data.batch_size = 1 is refused"),  # below the field's minimum (ge 2)
    (["data.sampler.m=2.5"], "data.sampler.m = 2.5 is refused"),  # not an integer
    (["loss.alpha="], "lists no values"),  # an empty grid
    (["run.seed=1,2"], "swept by the seeds"),
])
def test_bad_grids_are_refused_before_anything_is_written(tmp_path, grid, message):
    path = write(tmp_path)
    with pytest.raises(RecipeError, match=message):
        sweep(path, tmp_path / "s", grid=grid, runner=lambda *a, **k: pytest.fail("trained"))
    assert not (tmp_path / "s").exists()


def test_bad_sweep_files_are_refused(tmp_path):
    for text, message in ((SWEEP.replace("[1.0, 2.0]", "[]"), "non-empty choices"),
                          (SWEEP.replace("seeds = [0, 1, 2]", "seeds = []"), "no seeds"),
                          (SWEEP.replace('type = "categorical"\nchoices = [1.0, 2.0]', 'type = "float"\nlow = 1.0\n'
                                         'high = 2.0'), "a sweep lists its values")):
        with pytest.raises(RecipeError, match=message):
            load_grid(write(tmp_path, text))


def test_sweep_runs_each_cell_once_resumes_and_reports_mean_and_ci(tmp_path):
    path = write(tmp_path)
    scores = {(a, s): 0.1 * a + 0.01 * s * s for a in (1.0, 2.0) for s in range(3)}
    calls, lines = [], []
    sweep(path, tmp_path / "s", runner=fake_runner(calls, scores, fail={(2.0, 2)}), echo=lines.append)
    assert sorted(k for k, _ in calls) == sorted(scores)
    assert {out.relative_to(tmp_path / "s").as_posix() for _, out in calls} == {
        f"runs/loss.alpha={a}/seed-{s}" for a, s in scores}
    assert "5 complete, 1 failed" in lines[-1]
    calls.clear()
    sweep(path, tmp_path / "s", runner=fake_runner(calls, scores), echo=lines.append)  # a rerun: nothing left
    assert calls == []
    sweep(path, tmp_path / "s", seeds="0,3", runner=fake_runner(calls, {**scores, (1.0, 3): 0.5, (2.0, 3): 0.9}),
          echo=lines.append)  # one more seed: only its two runs
    assert sorted(k for k, _ in calls) == [(1.0, 3), (2.0, 3)]
    _, study = load(tmp_path / "s", None)
    standing = outcomes(study.get_trials())
    assert len(standing) == 8 and len(study.trials) == 8
    failed = standing["runs/loss.alpha=2.0/seed-2"]
    assert failed.state == optuna.trial.TrialState.FAIL
    assert failed.user_attrs["fail_reason"] == "RuntimeError: loss is nan at step 3"
    assert {t.user_attrs[CELL_ATTR] for t in study.trials} == set(standing)

    table = write_report(str(tmp_path / "s"))
    seeds = {1.0: [0.1, 0.11, 0.14, 0.5], 2.0: [0.2, 0.21, 0.9]}  # alpha 2.0's seed 2 failed
    for alpha, values in seeds.items():
        mean = statistics.fmean(values)
        half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
        counts = f"{len(values)} | {4 - len(values)} | 0"
        assert f"| loss.alpha={alpha} | {counts} | {mean:.4f} ± {half:.4f} | 0.5000 ± 0.0000 |" in table
    best = dmlplug.validate(str(tmp_path / "s" / "report" / "best.toml"))  # 0.4375 for 2.0 > 0.2125 for 1.0
    assert best.recipe.loss["alpha"] == 2.0 and best.recipe.data.dataset["name"] == "glyphs"
    assert "best: loss.alpha=2.0" in table
    assert table.splitlines()[0] in (tmp_path / "s" / "report" / "sweep.md").read_text()


def cli(*args):
    return subprocess.run([sys.executable, "-m", "dmlplug", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)


def test_cli_errors_exit_2_with_nothing_written(tmp_path):
    path = write(tmp_path)
    checks = [
        (["sweep", "run", path, "--dir", tmp_path / "a", "--grid", "loss.alpa=1.0"], "loss.alpa", "a"),
        (["sweep", "run", tmp_path / "recipe.toml", "--dir", tmp_path / "b", "--grid", "data.batch_size=1"],
         "data.batch_size = 1 is refused", "b"),
        (["sweep", "run", path, "--dir", tmp_path / "c", "--storage", "postgresql://dmlplug@127.0.0.1:1/none"],
         "cannot open the study storage", "c"),
        (["validate", path, "--set", "loss.alpha=x"], "loss.alpha", None),
    ]
    for args, message, folder in checks:
        result = cli(*args)
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result
        assert folder is None or not (tmp_path / folder).exists()
        assert "--grid" not in args or 'where: --grid: params."' in result.stderr  # names where the value came from
    assert "OK (2 configurations x 3 seeds" in cli("sweep", "validate", path).stdout
    assert "sweep of 2 configurations x 3 seeds" in cli("validate", path).stdout


def test_a_directory_holding_another_sweep_or_a_search_is_refused(tmp_path):
    path = write(tmp_path)
    sweep(path, tmp_path / "s", seeds="0", runner=fake_runner([], {(1.0, 0): 0.1, (2.0, 0): 0.2}),
          echo=lambda _: None)
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "s").rglob("*"))
    result = cli("sweep", "run", path, "--dir", tmp_path / "s", "--set", "optimizer.lr=0.01")
    assert result.returncode == 2 and "was made with a different recipe or --set overrides" in result.stderr
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "s").rglob("*")) == before
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "tune.json").write_text("{}")
    result = cli("sweep", "run", path, "--dir", tmp_path / "t")
    assert result.returncode == 2 and "is not a sweep directory" in result.stderr
    assert [p.name for p in (tmp_path / "t").iterdir()] == ["tune.json"]
    result = cli("sweep", "report", tmp_path / "t")
    assert result.returncode == 2 and "is not a `dmlplug sweep` directory" in result.stderr


def test_the_documented_sweep_file_is_the_shipped_one_and_validates():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "tune.md").read_text()
    block = doc.split("```toml\n# recipes/tune/quickstart.sweep.toml\n", 1)[1].split("```", 1)[0]
    shipped = root / "recipes" / "tune" / "quickstart.sweep.toml"
    assert block.strip() in shipped.read_text()  # the file has a header comment above the same text
    grid = load_grid(shipped)
    assert len(grid.cells()) == 4 * 3 and grid.metric == "map@r"


def test_a_cell_queued_twice_is_trained_once_and_a_lost_one_is_retried_once(tmp_path):
    """The grid engine's two guards, in one process: a duplicate queued by two commands starting together is
    dropped untrained; a running cell whose process is gone is failed, queued again once, and trained."""
    import socket

    from dmlplug.errors import RunError
    from dmlplug_builtins.tune.grid import DUPLICATE_ATTR, Cell, open_grid_study, retried_numbers, work
    from dmlplug_builtins.tune.study import TAKEN_ATTR

    study = open_grid_study(tmp_path, None, "grid", "identity")
    cells = [Cell("a", {"x": 1}), Cell("b", {"x": 2}), Cell("c", {"x": 3})]
    for cell in [*cells, cells[0], Cell("d", {"x": 4})]:  # "a" queued by two commands
        study.enqueue_trial({}, user_attrs={CELL_ATTR: cell.name, "values": cell.values})
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process id that no longer runs: "c" was taken by a worker that died
    dead = f"{socket.gethostname()}:{gone.pid}"
    for number, mark in ((2, f"{dead}#2"), (4, f"{dead}#0")):  # "d" runs with a mark copied from another trial
        trial_id = study.trials[number]._trial_id
        study._storage.set_trial_state_values(trial_id, optuna.trial.TrialState.RUNNING)
        study._storage.set_trial_user_attr(trial_id, "worker", dead)
        study._storage.set_trial_user_attr(trial_id, TAKEN_ATTR, mark)
    trained, lines = [], []
    progress = work(study, cells, lambda c: trained.append(c.name) or {"m": float(c.values["x"])}, echo=lines.append)
    assert sorted(trained) == ["a", "b", "c"] and progress.recovered == [2]
    assert study.trials[4].state == optuna.trial.TrialState.RUNNING  # not its owner's mark: left alone
    trials = study.get_trials()
    duplicate = [t for t in trials if DUPLICATE_ATTR in t.user_attrs]
    assert [(t.number, t.user_attrs[DUPLICATE_ATTR]) for t in duplicate] == [(3, 0)]
    assert trials[2].state == optuna.trial.TrialState.FAIL and retried_numbers(trials) == {2}
    standing = outcomes(trials)
    assert {n: t.user_attrs.get("metric:m") for n, t in standing.items()} == {"a": 1.0, "b": 2.0, "c": 3.0, "d": None}
    assert standing["c"].system_attrs["failed_trial"] == 2
    assert work(study, cells, lambda c: pytest.fail("trained twice"), echo=lines.append).trained == []
    with pytest.raises(RunError, match="belongs to another sweep"):
        open_grid_study(tmp_path, None, "grid", "another identity")
