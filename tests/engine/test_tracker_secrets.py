"""No password reaches a file: a recipe that holds one is refused before anything runs (the run directory and every
checkpoint would keep it), and a run whose environment holds the usual credentials (``PGPASSWORD``,
``MLFLOW_TRACKING_PASSWORD``, ``WANDB_API_KEY``) logs to TensorBoard, a real MLflow server and W&B (offline) without
any of them in the stored records of all three or in the run directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from e2e import TINY_RECIPE
from test_mlflow_logger import mlflow_server  # noqa: F401 - the fixture: a real MLflow server
from test_wandb_logger import wandb_env  # noqa: F401 - the fixture: W&B offline, kept inside tmp_path

#: Every secret: a URL's password and a password in notes (refused in a recipe), and the environment's.
URL_PASSWORD, NOTES_PASSWORD = "urlpw-5f3a9c", "notespw-0b7d21"
ENVIRONMENT = {"PGPASSWORD": "pgpw-81c4e2", "MLFLOW_TRACKING_USERNAME": "ann",
               "MLFLOW_TRACKING_PASSWORD": "mlpw-c39d07", "WANDB_API_KEY": "wbkey-2e6f1a" + "0" * 28}
SECRETS = [URL_PASSWORD, NOTES_PASSWORD, *(v for k, v in ENVIRONMENT.items() if k != "MLFLOW_TRACKING_USERNAME")]

RECIPE = TINY_RECIPE + """
[[loggers]]
name = "tensorboard"
histograms = false
projector = false
[[loggers]]
name = "wandb"
[[loggers]]
name = "mlflow"
"""
SETS = ["data.dataset.num_classes=40", "data.dataset.images_per_class=4", "data.batch_size=8", "data.sampler.m=2",
        "data.sampler.batches_per_epoch=4", "head.embedding_size=8", "run.epochs=1", "evaluation.initial=false"]


def _holding(folder: Path) -> list[str]:
    """Files under ``folder`` whose bytes contain any secret."""
    def holds(data: bytes) -> bool:
        return any(secret.encode() in data for secret in SECRETS)

    return [str(path) for path in folder.rglob("*") if path.is_file() and holds(path.read_bytes())]


@pytest.mark.parametrize("where", ["loggers[3].tracking_uri=http://ann:{url}@mlflow.internal:5000",
                                   "loggers[2].notes=trials in postgresql://ann:{notes}@db/tune"])
def test_a_recipe_holding_a_password_is_refused_before_anything_runs(tmp_path, where):
    recipe = tmp_path / "tracked.toml"
    recipe.write_text(RECIPE)
    pair = where.format(url=URL_PASSWORD, notes=NOTES_PASSWORD)
    for command in (["validate", str(recipe)], ["run", str(recipe), "--out", str(tmp_path / "run")]):
        proc = subprocess.run([sys.executable, "-m", "dmlplug", *command, "--set", pair], capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 2, proc.stderr
        assert "holds a credential in " + pair.split("=")[0] in proc.stderr
        assert "MLFLOW_TRACKING_PASSWORD" in proc.stderr  # where the password goes instead
        assert not any(secret in proc.stdout + proc.stderr for secret in SECRETS)  # the value is never echoed
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_no_secret_of_the_environment_reaches_a_tracker_or_the_run_directory(mlflow_server, wandb_env,  # noqa: F811
                                                                             tmp_path, tmp_path_factory):
    import wandb
    from mlflow import MlflowClient

    recipe, run_dir = tmp_path / "tracked.toml", tmp_path / "run"
    recipe.write_text(RECIPE)
    sets = [arg for pair in [*SETS, f"loggers[3].tracking_uri={mlflow_server}"] for arg in ("--set", pair)]
    proc = subprocess.run([sys.executable, "-m", "dmlplug", "run", str(recipe), "--out", str(run_dir), "--quiet",
                           *sets], capture_output=True, text=True, env={**os.environ, **ENVIRONMENT}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    wandb.teardown()

    state = json.loads((run_dir / "mlflow.json").read_text())
    assert MlflowClient(mlflow_server).get_run(state["run_id"]).data.params["loggers.3.tracking_uri"] == mlflow_server
    assert list(run_dir.glob("wandb/offline-run-*/files/recipe.resolved.toml"))

    # The MLflow server's store and artifacts (the fixture's folder, mlflow*/ under this worker's base), W&B's
    # offline run and settings, the TensorBoard event files, every file of the run directory: none holds a secret.
    stores = [*tmp_path_factory.getbasetemp().glob("mlflow*"), tmp_path / "wandb-home", run_dir]
    assert list(run_dir.glob("tb/events.out.tfevents.*")) and all(store.is_dir() for store in stores)
    assert [file for store in stores for file in _holding(store)] == []
    assert not any(secret in proc.stdout + proc.stderr for secret in SECRETS)
