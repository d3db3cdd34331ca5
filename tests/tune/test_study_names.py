"""``--study NAME``: one storage holds several searches and sweeps, each under its own name, and a directory
remembers its study's name; on the journal file and on a real PostgreSQL server started here."""

import json
from pathlib import Path

import optuna
import pytest
from e2e import TINY_RECIPE
from postgres import postgres_server, server_binaries
from tiny import Scored, registry, scoring_runner, write_tiny

from dmlplug.errors import RunError
from dmlplug_builtins.oodml.splitfile import OodSplit, SplitFile, save_splits
from dmlplug_builtins.oodml.sweep import run_sweep
from dmlplug_builtins.tune.report import load
from dmlplug_builtins.tune.sweep import sweep
from dmlplug_builtins.tune.sweep_report import load as load_sweep
from dmlplug_builtins.tune.tune import tune

QUIET = {"echo": lambda _: None}


def oodml_runner(recipe_path, overrides, *, out, device, quiet):
    Path(out).mkdir(parents=True)
    (Path(out) / "results.json").write_text(json.dumps({"status": "completed", "metrics": {"recall@1": 0.5}}))


def tiny_in(folder):
    folder.mkdir()
    return write_tiny(folder)


def other_space(tmp_path):
    """A second search: the tiny space with another learning-rate range."""
    space = tiny_in(tmp_path / "b")
    space.write_text(space.read_text().replace("high = 1e-2", "high = 5e-2"))
    return space


def test_a_directory_keeps_its_study_name(tmp_path):
    space = write_tiny(tmp_path)
    tune(space, tmp_path / "t", trials=1, registry=registry(), study_name="lr-search", runner=scoring_runner, **QUIET)
    assert json.loads((tmp_path / "t" / "tune.json").read_text())["study"] == "lr-search"
    study = tune(space, tmp_path / "t", trials=2, registry=registry(),
                 runner=scoring_runner, **QUIET)  # no --study: the recorded one
    assert study.study_name == "lr-search" and len(study.trials) == 2
    assert load(tmp_path / "t", None)[1].study_name == "lr-search"
    with pytest.raises(RunError, match="belongs to the study 'lr-search', not 'other'"):
        tune(space, tmp_path / "t", trials=3, registry=registry(), study_name="other", runner=scoring_runner, **QUIET)
    with pytest.raises(RunError, match="is not a study name"):
        tune(space, tmp_path / "u", trials=1, registry=registry(), study_name=" ", runner=scoring_runner, **QUIET)
    assert not (tmp_path / "u").exists()


@pytest.mark.skipif(server_binaries() is None, reason="PostgreSQL server binaries (initdb, pg_ctl) are not installed")
def test_one_database_holds_several_searches_and_sweeps(tmp_path):
    first, second = tiny_in(tmp_path / "a"), other_space(tmp_path)
    splits = save_splits(tmp_path / "s.json", SplitFile(splits=[
        OodSplit(id=1, fid=1.0, train=["a", "b"], test=["c", "d"], split_train=["a"], split_val=["b"], episodes={})]))
    (tmp_path / "r.toml").write_text(TINY_RECIPE)
    with postgres_server() as url:
        tune(first, tmp_path / "ms", trials=2, registry=registry(),
             storage=url, study_name="ms", runner=scoring_runner, **QUIET)
        tune(second, tmp_path / "arc", trials=3, registry=registry(),
             storage=url, study_name="arc", runner=scoring_runner, **QUIET)
        tune(second, tmp_path / "default", trials=1, registry=registry(), storage=url, runner=scoring_runner, **QUIET)
        # Without a name of its own, a second search lands on the default study, made with another space.
        with pytest.raises(RunError, match="the study 'dmlplug-tune' was created with another space"):
            tune(first, tmp_path / "clash", trials=1, registry=registry(), storage=url, runner=scoring_runner, **QUIET)
        sweep(first.parent / "recipe.toml", tmp_path / "grid", grid=["optimizer.lr=0.001,0.01"], storage=url,
              study_name="lr-grid", runner=lambda *a, out, **k: Scored(0.5), **QUIET)
        run_sweep(tmp_path / "r.toml", splits, seeds=[0, 1], sweep_dir=tmp_path / "oodml", storage=url,
                  study_name="oodml-a", runner=oodml_runner, check_data=False, **QUIET)
        names = set(optuna.get_all_study_names(url))
        assert {"ms", "arc", "dmlplug-tune", "lr-grid", "oodml-a"} <= names
        assert [len(load(tmp_path / d, url)[1].trials) for d in ("ms", "arc", "default")] == [2, 3, 1]
        assert len(load_sweep(tmp_path / "grid", url)[1].trials) == 2
        oodml = optuna.load_study(study_name="oodml-a", storage=url)
        assert sorted(t.user_attrs["cell"] for t in oodml.trials) == ["split-01/seed-0", "split-01/seed-1"]
        assert json.loads((tmp_path / "oodml" / "sweep.json").read_text())["study"] == "oodml-a"
    with pytest.raises(RunError, match="--study names the study that workers share"):
        run_sweep(tmp_path / "r.toml", splits, seeds=[0], sweep_dir=tmp_path / "plain", study_name="x",
                  runner=oodml_runner, check_data=False, **QUIET)
    assert not (tmp_path / "plain").exists()
