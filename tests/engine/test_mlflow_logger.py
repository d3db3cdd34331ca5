"""The ``mlflow`` logger against a real MLflow tracking server: parameters, metrics at TensorBoard's steps,
artifacts over HTTP, the run-directory tag, and a killed-then-resumed dmlplug run continuing the same MLflow run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mlflow_tracking
import pytest
from e2e import TINY_RECIPE, sigkill_when
from stalling import STALL_AFTER_EVAL

from dmlplug_builtins.loggers.mlflow_logger import RESUMED_TAG, RUN_DIR_TAG, metric_key, param_value
from dmlplug_builtins.loggers.tracker_rows import SELECTED_ON_KEY

# ------------------------------------------------------------------------------------------ without a server


def test_metric_keys_and_param_values_are_what_mlflow_accepts():
    assert metric_key("eval/test/recall@1") == "eval/test/recall_at_1"
    assert metric_key("eval/test/map@r") == "eval/test/map_at_r"
    assert metric_key("train/loss/s2sd/dist[0]") == "train/loss/s2sd/dist.0"
    assert metric_key("regularizers[10].weight") == "regularizers.10.weight"
    assert metric_key("a b/c:d-e_f.g") == "a b/c:d-e_f.g" and metric_key("x{y}") == "x_y_"
    assert metric_key("train/lr/backbone") == "train/lr/backbone"
    assert param_value([1, 2]) == "[1, 2]" and param_value(None) == "null" and param_value(True) == "true"
    assert param_value("x" * 7000).endswith("...") and len(param_value("x" * 7000)) == 6000


def _toml(text):
    import tomllib

    return tomllib.loads(text)


# ------------------------------------------------------------------------------------------ a real server

mlflow_server = mlflow_tracking.mlflow_server  # the module-scoped fixture: one server for this module's tests

#: Batches of 8, 4 steps per epoch, 2 epochs, a checkpoint after every step, losses logged at every step.
SMALL = ["data.dataset.num_classes=40", "data.dataset.images_per_class=4", "data.batch_size=8", "data.sampler.m=2",
         "data.sampler.batches_per_epoch=4", "head.embedding_size=8", "run.epochs=2", "run.checkpoint_every_steps=1",
         "run.log_every=1"]

def _recipe(uri: str) -> str:
    return TINY_RECIPE + f"""
[[evaluators]]
name = "opis"
[[loggers]]
name = "tensorboard"
histograms = false
projector = false
hparams = false
[[loggers]]
name = "mlflow"
tracking_uri = "{uri}"
"""


def _fresh(history, resumes):
    """The points of a metric history without those a killed run logged past its checkpoint (the tag's rule)."""
    return [m for m in history
            if not any(m.step > r["step"] and m.timestamp < r["timestamp"] for r in resumes)]


@pytest.mark.slow
def test_mlflow_run_read_back_and_continued_after_a_kill_and_resume(mlflow_server, tmp_path):
    from mlflow import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import dmlplug

    recipe = tmp_path / "tracked.toml"
    recipe.write_text(_recipe(mlflow_server))
    killed, script, marker = tmp_path / "killed", tmp_path / "stall.py", tmp_path / "evaluated"
    script.write_text(STALL_AFTER_EVAL)
    sets = [arg for pair in SMALL for arg in ("--set", pair)]
    child = subprocess.Popen([sys.executable, str(script), str(marker), "run", str(recipe), "--out", str(killed),
                              "--quiet", *sets], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sigkill_when(child, marker, what="the first evaluation did not come")
    assert int(marker.read_text()) == 4
    first = json.loads((killed / "mlflow.json").read_text())
    client = MlflowClient(tracking_uri=mlflow_server)
    assert client.get_run(first["run_id"]).info.status == "RUNNING"  # killed: nobody closed it

    assert dmlplug.run(killed, resume=True, quiet=True).status == "completed"
    state = json.loads((killed / "mlflow.json").read_text())
    assert state == first  # the same MLflow run continued
    run = client.get_run(state["run_id"])
    assert run.info.status == "FINISHED" and run.info.artifact_uri.startswith("mlflow-artifacts:")
    assert client.get_experiment(run.info.experiment_id).name == "tiny"  # default: the run name
    assert run.info.run_name == killed.name
    # Parameters: the flattened recipe.
    assert run.data.params["loss.name"] == "multi_similarity" and run.data.params["run.epochs"] == "2"
    assert run.data.params["evaluators.1.name"] == "opis"
    assert run.data.tags[RUN_DIR_TAG] == str(killed.resolve())
    assert run.data.tags[SELECTED_ON_KEY] == "last"  # what selected best.pt: no split (no validation classes)
    resumes = json.loads(run.data.tags[RESUMED_TAG])
    assert [r["step"] for r in resumes] == [3]

    # Metrics: MLflow cannot delete values; the stale points of the killed run (step 4) stay, told by the tag.
    losses = client.get_metric_history(state["run_id"], "train/loss/total")
    assert sorted(m.step for m in losses) == [1, 2, 3, 4, 4, 5, 6, 7, 8]
    assert sorted(m.step for m in _fresh(losses, resumes)) == list(range(1, 9))
    recall = client.get_metric_history(state["run_id"], "eval/test/recall_at_1")
    assert sorted(m.step for m in recall) == [0, 4, 4, 8]
    last_recall = max(_fresh(recall, resumes), key=lambda m: m.step)
    results = json.loads((killed / "results.json").read_text())
    assert last_recall.value == pytest.approx(results["metrics"]["recall@1"], abs=1e-6)
    assert run.data.metrics["eval/test/recall_at_1"] == pytest.approx(results["metrics"]["recall@1"], abs=1e-6)
    assert "eval/test/counts/excluded_queries" in run.data.metrics
    # The same steps as TensorBoard's (whose events past the checkpoint were trimmed on resume).
    acc = EventAccumulator(str(killed / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    for tag in ("train/loss/total", "eval/test/recall@1", "eval/test/opis", "train/lr/backbone", "epoch"):
        history = _fresh(client.get_metric_history(state["run_id"], metric_key(tag)), resumes)
        assert sorted(m.step for m in history) == [e.step for e in acc.Scalars(tag)], tag

    # Artifacts, uploaded over HTTP through the server: retrieval pictures, figures, results.
    pictures = {a.path for a in client.list_artifacts(state["run_id"], "pictures/test")}
    assert {"pictures/test/epoch_001_worst.png", "pictures/test/epoch_002_sample.png"} <= pictures
    figures = {a.path for a in client.list_artifacts(state["run_id"], "figures/test")}
    assert "figures/test/opis_utility_step_000008.png" in figures
    assert "results.json" in {a.path for a in client.list_artifacts(state["run_id"])}
    local = client.download_artifacts(state["run_id"], "pictures/test/epoch_002_worst.png", str(tmp_path))
    assert Path(local).read_bytes() == (killed / "pictures" / "test" / "epoch_002_worst.png").read_bytes()

    # A forced resume with one more epoch: still the same MLflow run; the changed value is a tag (params are fixed).
    dmlplug.run(killed, overrides=["run.epochs=3"], resume=True, force=True, quiet=True)
    assert json.loads((killed / "mlflow.json").read_text()) == state
    run = client.get_run(state["run_id"])
    assert run.info.status == "FINISHED" and run.data.params["run.epochs"] == "2"
    assert run.data.tags["dmlplug.changed.run.epochs"] == "3"
    resumes = json.loads(run.data.tags[RESUMED_TAG])
    assert [r["step"] for r in resumes] == [3, 8]
    losses = _fresh(client.get_metric_history(state["run_id"], "train/loss/total"), resumes)
    assert sorted(m.step for m in losses) == list(range(1, 13))
    assert len(client.search_runs([run.info.experiment_id])) == 1


def test_an_unreachable_tracking_server_stops_the_run_before_its_directory_is_written(tmp_path, monkeypatch):
    import dmlplug
    from dmlplug.errors import RunError

    # No MLFLOW_HTTP_REQUEST_* settings: the client's own retries would take minutes; the logger's probe does not.
    # The URI from the environment, where a password may be (a recipe holding one is refused: test_tracker_secrets).
    uri = f"http://ann:s3cret@127.0.0.1:{mlflow_tracking.free_port()}"  # nothing listens there
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    recipe = tmp_path / "tracked.toml"
    recipe.write_text(TINY_RECIPE + '[[loggers]]\nname = "mlflow"\n')
    with pytest.raises(RunError) as info:
        dmlplug.run(recipe, overrides=SMALL, out=tmp_path / "run", quiet=True)
    message = info.value.render()
    assert "ann:***@127.0.0.1" in message and "s3cret" not in message
    assert "does not answer: connection refused" in message and "MLFLOW_TRACKING_URI" in message
    assert "start the server" in message and "remove the mlflow logger" in message
    assert not (tmp_path / "run").exists()  # no failed run directory left behind


def test_a_server_error_answer_is_no_server_and_any_other_answer_is_one():
    import http.server
    import threading

    from dmlplug_builtins.loggers.mlflow_server import probe

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the handler's name is http.server's)
            self.send_response(503 if self.path == "/down/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert probe(f"{base}/down/") == "GET /health answered 503 Service Unavailable"
        assert probe(f"{base}/behind-a-proxy") is None  # 404: a server is there; MLflow speaks for itself
    finally:
        server.shutdown()
        server.server_close()
    assert probe("sqlite:///mlflow.db") is None and probe("databricks") is None  # nothing to ask
