"""The ``wandb`` logger in W&B's offline mode, read back from the files W&B wrote (no network): the config, the
metrics at TensorBoard's steps, the pictures and figures as media, the run-directory link, and a killed-then-resumed
dmlplug run continuing the same W&B run."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from e2e import TINY_RECIPE, sigkill_when
from stalling import STALL_AFTER_EVAL
from wandb_records import read_run, read_segment

from dmlplug.engine.flatten import flatten_recipe
from dmlplug.errors import RecipeError
from dmlplug_builtins.loggers.tracker_rows import SELECTED_ON_KEY
from dmlplug_builtins.loggers.wandb_logger import RESUMED_KEY, RUN_DIR_KEY, RUN_NAME_KEY, STATUS_KEY


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    """W&B kept inside tmp_path and off the network: offline, its settings, caches and server address local."""
    for name in [k for k in os.environ if k.startswith("WANDB_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{_free_port()}")  # nothing listens there
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc, no ~/.config/wandb
    yield
    import wandb

    wandb.teardown()  # stop the W&B service this process started: it writes out what it still holds


# ------------------------------------------------------------------------------------------ validation


def _toml(text):
    return tomllib.loads(text)


def test_a_bad_mode_is_a_validation_error():
    import dmlplug

    with pytest.raises(RecipeError) as info:
        dmlplug.validate(_toml(TINY_RECIPE + '[[loggers]]\nname = "wandb"\nmode = "cloud"\n'))
    assert "loggers[1]" in info.value.render() and "mode" in info.value.render()


# ------------------------------------------------------------------------------------------ the reader


def test_the_reader_joins_records_split_across_blocks(wandb_env, tmp_path):
    """A row larger than a 32 KiB block is written in fragments; the test reader must give it back whole."""
    import wandb

    run = wandb.init(project="p", dir=str(tmp_path), reinit="create_new", settings=wandb.Settings(silent=True))
    big = "".join(chr(65 + i % 26) for i in range(100_000))
    run.log({"global_step": 1, "big": big, "x": 0.5})
    run.log({"global_step": 2, "x": 0.25})
    run.finish()
    wandb.teardown()
    segment = read_segment(Path(run.settings.sync_dir))
    assert [(r["global_step"], r["x"]) for r in segment.history] == [(1, 0.5), (2, 0.25)]
    assert segment.history[0]["big"] == big and segment.exit_code == 0 and segment.run.run_id == run.id


# ------------------------------------------------------------------------------------------ a real run

#: Batches of 8, 4 steps per epoch, 2 epochs, a checkpoint after every step, losses logged at every step.
SMALL = ["data.dataset.num_classes=40", "data.dataset.images_per_class=4", "data.batch_size=8", "data.sampler.m=2",
         "data.sampler.batches_per_epoch=4", "head.embedding_size=8", "run.epochs=2", "run.checkpoint_every_steps=1",
         "run.log_every=1"]

RECIPE = TINY_RECIPE + """
[[evaluators]]
name = "opis"
[[loggers]]
name = "tensorboard"
histograms = false
projector = false
hparams = false
[[loggers]]
name = "wandb"
tags = ["glyphs", "ci"]
group = "tests"
"""


def _fresh(rows, resumes):
    """The rows of a run without those a killed run logged past its checkpoint (the config's rule)."""
    return [r for r in rows if not any(r["global_step"] > s["step"] and r["_timestamp"] < s["timestamp"]
                                       for s in resumes)]


def _steps(rows, key):
    return sorted(r["global_step"] for r in rows if key in r)


def _eval_is_written(marker, folder: Path):
    """True once the child stalls after evaluating epoch 1 and W&B has written that evaluation to disk.

    W&B's service writes the transaction log every ``_transaction_log_flush_interval`` seconds (15 by default,
    0.2 in this test) and drops what it still holds when its parent is SIGKILLed: waiting for the row makes the
    killed part of the run deterministic (its stale step-4 rows are there to be told apart).
    """
    logs = list(folder.glob("wandb/offline-run-*")) if marker.exists() else []
    return bool(logs) and any(r.get("global_step") == 4 and "eval/test/recall@1" in r
                              for r in read_segment(logs[0]).history)


@pytest.mark.slow
def test_wandb_run_read_back_and_continued_after_a_kill_and_resume(wandb_env, tmp_path, monkeypatch):
    import wandb
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import dmlplug

    recipe = tmp_path / "tracked.toml"
    recipe.write_text(RECIPE)
    killed, script, marker = tmp_path / "killed", tmp_path / "stall.py", tmp_path / "evaluated"
    script.write_text(STALL_AFTER_EVAL)
    sets = [arg for pair in SMALL for arg in ("--set", pair)]
    env = {**os.environ, "WANDB__TRANSACTION_LOG_FLUSH_INTERVAL": "0.2"}
    child = subprocess.Popen([sys.executable, str(script), str(marker), "run", str(recipe), "--out", str(killed),
                              "--quiet", *sets], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    sigkill_when(child, lambda: _eval_is_written(marker, killed), what="the first evaluation was not written")
    assert int(marker.read_text()) == 4
    first = json.loads((killed / "wandb.json").read_text())
    assert first["mode"] == "offline" and first["project"] == "tiny" and first["resumed"] == []  # WANDB_MODE honoured

    assert dmlplug.run(killed, resume=True, quiet=True).status == "completed"
    wandb.teardown()  # the W&B service writes out everything before we read
    state = json.loads((killed / "wandb.json").read_text())
    assert state["id"] == first["id"]  # the same W&B run continued
    segments = read_run(state["id"], killed)
    assert len(segments) == 2 and all(s.run.run_id == state["id"] for s in segments)
    assert [s.exit_code for s in segments] == [None, 0]  # the killed process never finished its part
    assert not segments[0].run.resume and segments[1].run.resume
    run = segments[1]
    assert run.run.project == "tiny" and run.run.display_name == killed.name
    assert list(run.run.tags) == ["glyphs", "ci"] and run.run.run_group == "tests"
    assert run.summary[STATUS_KEY] == "completed"

    # Config: the flattened recipe (None values, which TOML cannot hold, are the keys missing from the file) and the
    # run directory.
    flat = flatten_recipe(_toml((killed / "recipe.resolved.toml").read_text()))
    config = {k: v for k, v in run.config.items() if not k.startswith(("dmlplug.", "_"))}
    assert {k: v for k, v in config.items() if k in flat} == json.loads(json.dumps(flat))
    assert all(config[k] is None for k in set(config) - set(flat))
    assert config["loss.name"] == "multi_similarity" and config["run.epochs"] == 2
    assert config["evaluators[1].name"] == "opis" and config["loggers[2].tags"] == ["glyphs", "ci"]
    assert run.config[RUN_DIR_KEY] == str(killed.resolve()) and run.config[RUN_NAME_KEY] == "tiny"
    assert run.config[SELECTED_ON_KEY] == "last"  # what selected best.pt: no split (no validation classes)
    resumes = run.config[RESUMED_KEY]
    assert [r["step"] for r in resumes] == [3] and state["resumed"] == resumes

    # Metrics: W&B cannot delete rows; the stale rows of the killed run (step 4) stay, told by dmlplug.resumed.
    rows = [row for segment in segments for row in segment.history]
    assert _steps(rows, "train/loss/total") == [1, 2, 3, 4, 4, 5, 6, 7, 8]
    fresh = _fresh(rows, resumes)
    assert _steps(fresh, "train/loss/total") == list(range(1, 9))
    assert _steps(rows, "eval/test/recall@1") == [0, 4, 4, 8]
    results = json.loads((killed / "results.json").read_text())
    last = max((r for r in fresh if "eval/test/recall@1" in r), key=lambda r: r["global_step"])
    assert last["eval/test/recall@1"] == pytest.approx(results["metrics"]["recall@1"], abs=1e-9)
    assert run.summary["eval/test/recall@1"] == pytest.approx(results["metrics"]["recall@1"], abs=1e-9)
    assert "eval/test/counts/excluded_queries" in last
    # The same steps (and values) as TensorBoard's, whose events past the checkpoint were trimmed on resume.
    acc = EventAccumulator(str(killed / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    for tag in ("train/loss/total", "eval/test/recall@1", "eval/test/opis", "train/lr/backbone", "epoch"):
        events = acc.Scalars(tag)
        assert _steps(fresh, tag) == [e.step for e in events], tag
        logged = sorted((r["global_step"], r[tag]) for r in fresh if tag in r)
        assert [v for _, v in logged] == pytest.approx([e.value for e in events], rel=1e-6), tag

    # Pictures and figures: images in the rows of every evaluation, their files among the run's media.
    for kind in ("worst", "sample"):
        key = f"eval/test/pictures/{kind}"
        assert _steps(fresh, key) == [0, 4, 8]
        image = max((r for r in fresh if key in r), key=lambda r: r["global_step"])[key]
        assert image["_type"] == "image-file" and image["path"] in run.files
        original = (killed / "pictures" / "test" / f"epoch_002_{kind}.png").read_bytes()
        assert image["sha256"] == hashlib.sha256(original).hexdigest()
        assert (run.folder / "files" / image["path"]).read_bytes() == original
    figure = max((r for r in fresh if "eval/test/figure/opis_utility" in r), key=lambda r: r["global_step"])
    assert figure["global_step"] == 8 and _steps(fresh, "eval/test/figure/opis_utility") == [0, 4, 8]
    assert (run.folder / "files" / figure["eval/test/figure/opis_utility"]["path"]).read_bytes()[:4] == b"\x89PNG"
    # The results among the run's files.
    assert {"results.json", "recipe.resolved.toml"} <= set(run.files)
    assert (run.folder / "files" / "results.json").read_bytes() == (killed / "results.json").read_bytes()

    # A forced resume with one more epoch, W&B's files now in WANDB_DIR: still the same W&B run, config updated.
    elsewhere = tmp_path / "wandb-dir"
    monkeypatch.setenv("WANDB_DIR", str(elsewhere))
    dmlplug.run(killed, overrides=["run.epochs=3"], resume=True, force=True, quiet=True)
    wandb.teardown()
    assert json.loads((killed / "wandb.json").read_text())["id"] == state["id"]
    third = read_run(state["id"], elsewhere)
    assert len(third) == 1 and third[0].run.resume and third[0].exit_code == 0
    assert third[0].config["run.epochs"] == 3
    resumes = third[0].config[RESUMED_KEY]
    assert [r["step"] for r in resumes] == [3, 8]
    rows = [row for segment in read_run(state["id"], killed, elsewhere) for row in segment.history]
    assert _steps(_fresh(rows, resumes), "train/loss/total") == list(range(1, 13))


def test_online_without_a_login_is_a_clear_run_error(wandb_env, tmp_path, monkeypatch):
    import dmlplug
    from dmlplug.errors import RunError

    monkeypatch.setenv("WANDB_MODE", "online")
    recipe = tmp_path / "tracked.toml"
    recipe.write_text(TINY_RECIPE + '[[loggers]]\nname = "wandb"\nproject = "p"\n')
    with pytest.raises(RunError) as info:
        dmlplug.run(recipe, overrides=SMALL, out=tmp_path / "run", quiet=True)
    message = info.value.render()
    assert "'p'" in message and "wandb login" in message and 'mode = "offline"' in message
    assert not (tmp_path / "run" / "wandb.json").exists()


def test_disabled_mode_logs_nothing_and_the_run_completes(wandb_env, tmp_path):
    import dmlplug

    recipe = tmp_path / "tracked.toml"
    recipe.write_text(TINY_RECIPE + '[[loggers]]\nname = "wandb"\nmode = "disabled"\n')
    overrides = [s for s in SMALL if not s.startswith("run.")] + ["run.epochs=1"]
    assert dmlplug.run(recipe, overrides=overrides, out=tmp_path / "run", quiet=True).status == "completed"
    assert not (tmp_path / "run" / "wandb.json").exists() and not (tmp_path / "run" / "wandb").exists()
