"""Failure handling: non-finite losses, out-of-memory in evaluation, a full disk while checkpointing; and
determinism (same recipe and seed twice, with or without loader workers, give identical results)."""

import errno
import gc
import json
import multiprocessing

import pytest
import torch
from test_resume import SMALL

import dmlplug
from dmlplug import checkpoints as checkpoint_module
from dmlplug.engine.run import Run
from dmlplug.engine.train_step import TrainStep
from dmlplug.errors import RunError


def test_non_finite_term_stops_with_its_name_and_step_keeping_the_last_checkpoint(tiny_recipe, tmp_path,
                                                                                    monkeypatch):
    original = TrainStep.forward_terms

    def poisoned(self, *args, **kwargs):
        terms, output = original(self, *args, **kwargs)
        if kwargs["step"] == 3:
            terms["spread/inner"] = terms["loss"] * float("inf")
        return terms, output

    monkeypatch.setattr(TrainStep, "forward_terms", poisoned)
    with pytest.raises(RunError, match=r"loss term 'spread/inner' is inf at step 3 \(epoch 1\)"):
        dmlplug.run(tiny_recipe, overrides=SMALL, out=tmp_path / "r", quiet=True)
    state = torch.load(tmp_path / "r" / "checkpoints" / "last.pt", weights_only=False)
    # the last good state: with a checkpoint after every step, the check before writing step 3's stops the run
    assert state["step"] == 2
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    assert results["status"] == "failed" and "spread/inner" in results["error"]


def test_non_finite_term_found_at_the_next_logging_step_names_its_step_and_writes_no_checkpoint_after_it(
        tiny_recipe, tmp_path, monkeypatch):
    # The terms are read back from the device every run.log_every steps only (no host sync per step), so a
    # non-finite term at step 5 is found at step 6; the run stops there, naming step 5, and the last
    # checkpoint is still the one written before it (end of epoch 1, step 4).
    original, steps = TrainStep.forward_terms, []

    def poisoned(self, *args, **kwargs):
        terms, output = original(self, *args, **kwargs)
        steps.append(kwargs["step"])
        if kwargs["step"] == 5:
            terms["loss"] = terms["loss"] * float("nan")
        return terms, output

    monkeypatch.setattr(TrainStep, "forward_terms", poisoned)
    overrides = [o for o in SMALL if not o.startswith("run.checkpoint_every_steps")] + ["run.log_every=3"]
    with pytest.raises(RunError, match=r"loss term 'loss' is nan at step 5 \(epoch 2\)"):
        dmlplug.run(tiny_recipe, overrides=overrides, out=tmp_path / "r", quiet=True)
    assert steps == [1, 2, 3, 4, 5, 6]  # detected at the logging step 6, not at once
    state = torch.load(tmp_path / "r" / "checkpoints" / "last.pt", weights_only=False)
    assert state["step"] == 4 and state["epoch_complete"]
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())


def test_out_of_memory_in_evaluation_names_the_settings_to_lower(tiny_recipe, tmp_path, monkeypatch):
    calls = []

    def evaluate(self, split="test"):
        calls.append(split)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(Run, "evaluate", evaluate)
    with pytest.raises(RunError) as info:
        dmlplug.run(tiny_recipe, overrides=[*SMALL, "data.eval_batch_size=64"], out=tmp_path / "r", quiet=True)
    message = str(info.value)
    assert "out of memory while evaluating the test split" in message
    assert "data.eval_batch_size (now 64)" in message and "evaluation.memory_budget_mb" in message
    assert "--set data.eval_batch_size=32" in message and calls == ["test"]


def test_other_evaluation_errors_are_not_reported_as_memory_errors(tiny_recipe, tmp_path, monkeypatch):
    def evaluate(self, split="test"):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(Run, "evaluate", evaluate)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        dmlplug.run(tiny_recipe, overrides=SMALL, out=tmp_path / "r", quiet=True)


def test_full_disk_while_checkpointing_keeps_the_previous_checkpoint(tiny_recipe, tmp_path, monkeypatch):
    real_save, saves = torch.save, []

    def save(obj, handle, *args, **kwargs):
        saves.append(obj["step"])
        if len(saves) == 3:  # half a file, then the disk is full
            handle.write(b"PK\x03\x04 partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, handle, *args, **kwargs)

    monkeypatch.setattr(checkpoint_module.torch, "save", save)
    with pytest.raises(RunError, match="disk full") as info:
        dmlplug.run(tiny_recipe, overrides=[*SMALL, "run.epochs=1"], out=tmp_path / "r", quiet=True)
    assert "previous checkpoint" in str(info.value) and "--resume" in str(info.value)
    folder = tmp_path / "r" / "checkpoints"
    # no temporary file left; no best.pt: the untrained model (step 0) is a baseline, not a candidate
    assert sorted(p.name for p in folder.iterdir()) == ["last.pt"]
    monkeypatch.undo()
    state = torch.load(folder / "last.pt", weights_only=False)
    assert state["step"] == saves[1] == 1  # initial checkpoint (step 0), step 1; the third save failed
    result = dmlplug.run(tmp_path / "r", resume=True, quiet=True)  # and the run continues from it
    assert result.status == "completed"


def test_same_recipe_and_seed_give_identical_results_json_with_any_number_of_workers(tiny_recipe, tmp_path):
    runs = []
    for name, workers in (("a", 0), ("b", 2)):
        dmlplug.run(tiny_recipe, overrides=[*SMALL, "run.epochs=1", f"data.workers={workers}"], out=tmp_path / name,
                    quiet=True)
        runs.append(tmp_path / name)
    texts = [(d / "results.json").read_text() for d in runs]
    assert texts[0] == texts[1]
    weights = [torch.load(d / "checkpoints" / "last.pt", weights_only=False)["model"] for d in runs]
    for key in weights[0]:
        assert torch.equal(weights[0][key], weights[1][key])


def test_no_loader_worker_process_outlives_the_run_whether_it_completes_or_fails(tiny_recipe, tmp_path,
                                                                                 monkeypatch):
    # garbage collection off: the workers must be stopped by the run itself, not by a collection that happens
    # to run (one inside a later loader's forked worker raised "can only test a child process")
    gc.disable()
    try:
        dmlplug.run(tiny_recipe, overrides=[*SMALL, "run.epochs=1", "data.workers=2"], out=tmp_path / "ok",
                    quiet=True)
        assert multiprocessing.active_children() == []
        monkeypatch.setattr(TrainStep, "after_optimizer_step", _fail_on_step(2))
        with pytest.raises(RuntimeError, match="injected"):
            dmlplug.run(tiny_recipe, overrides=[*SMALL, "run.epochs=1", "data.workers=2"], out=tmp_path / "bad",
                        quiet=True)
        assert multiprocessing.active_children() == []
    finally:
        gc.enable()


def _fail_on_step(failing: int):
    def after_optimizer_step(self, output):
        if output is not None and output.step == failing:
            raise RuntimeError("injected failure")
    return after_optimizer_step


def test_channels_last_and_strict_determinism_options_run_on_cpu(tiny_recipe, tmp_path):
    before = torch.are_deterministic_algorithms_enabled()
    result = dmlplug.run(tiny_recipe, overrides=[*SMALL, "run.epochs=1", "run.channels_last=true",
                                                 "run.deterministic=true"], out=tmp_path / "r", quiet=True)
    assert result.status == "completed"
    assert torch.are_deterministic_algorithms_enabled() == before  # the process-wide switch is restored
