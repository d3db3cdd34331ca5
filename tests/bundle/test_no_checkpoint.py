"""A run directory without a checkpoint (stopped before its first one, or checkpoints deleted): export,
calibrate and embed RUN_DIR each say so in one message, exit 2, and write nothing."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(params=["empty_checkpoints", "no_checkpoints"])
def checkpointless(run_dir, tmp_path, request):
    """A copy of the tiny run whose checkpoints/ folder is empty (interrupted) or gone (deleted)."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("*.pt"))
    if request.param == "no_checkpoints":
        shutil.rmtree(copy / "checkpoints")
    else:
        assert list((copy / "checkpoints").iterdir()) == []
    return copy


def _one_clear_message(code, err, run):
    assert code == 2, err
    assert f"no checkpoint in run directory {run}" in err and "Traceback" not in err
    assert "give a run directory with a checkpoint" in err  # the fix


def test_export_calibrate_and_embed_refuse_a_run_without_checkpoints(checkpointless, image_folder, tmp_path, cli):
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code, _, err = cli("export", checkpointless, "--out", tmp_path / "bundle")
    _one_clear_message(code, err, checkpointless)
    code, out, err = cli("calibrate", checkpointless)
    _one_clear_message(code, err, checkpointless)
    assert out == ""
    code, _, err = cli("embed", checkpointless, image_folder, "--out", tmp_path / "e.npz", "-q")
    _one_clear_message(code, err, checkpointless)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing half-written
