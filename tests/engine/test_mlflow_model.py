"""``dmlplug export --log-model`` of a run the ``mlflow`` logger tracked, against a real MLflow tracking server: the
bundle as a pyfunc model of the same MLflow run, loaded back with MLflow and served by ``mlflow models serve``."""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import sys
import urllib.request

import mlflow_tracking
import numpy as np
import pytest
from e2e import BUNDLE_RUN_SETS, TINY_RECIPE

mlflow_server = mlflow_tracking.mlflow_server  # the module-scoped fixture: one server for this module's tests


@pytest.fixture(scope="module")
def tracked_run(mlflow_server, tmp_path_factory):
    """The bundle tests' seconds-long run, tracked by the mlflow logger on the test server."""
    import dmlplug

    folder = tmp_path_factory.mktemp("tracked")
    recipe = folder / "tracked.toml"
    recipe.write_text(TINY_RECIPE + f'[[loggers]]\nname = "mlflow"\ntracking_uri = "{mlflow_server}"\n')
    result = dmlplug.run(recipe, overrides=BUNDLE_RUN_SETS, out=folder / "run", quiet=True)
    assert result.status == "completed"
    return folder / "run"


def _png_files(run_dir, count):
    """The first ``count`` test images of the run as PNG files (bytes): what a client sends the model."""
    import dmlplug

    test = dmlplug.load_run(run_dir).dataset.test
    files = []
    for i in range(count):
        buffer = io.BytesIO()
        test.load_image(i).save(buffer, format="PNG")
        files.append(buffer.getvalue())
    return files


def _decoded(files):
    from PIL import Image

    return [Image.open(io.BytesIO(data)).convert("RGB") for data in files]


@pytest.mark.slow
def test_export_logs_the_bundle_as_a_model_of_the_run_that_mlflow_loads_and_serves(
        tracked_run, mlflow_server, cli, tmp_path, monkeypatch):
    import mlflow
    from mlflow import MlflowClient
    from mlflow.types import DataType

    import dmlplug

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)  # where runs:/ URIs are looked up
    run_id = json.loads((tracked_run / "mlflow.json").read_text())["run_id"]
    bundle = tmp_path / "bundle"
    code, out, err = cli("export", tracked_run, "--out", bundle, "--log-model")
    assert code == 0, err
    assert f"mlflow: logged the bundle as the model runs:/{run_id}/model (models:/m-" in err
    assert f"bundle written to {bundle}" in out

    # The model belongs to the run (its experiment, its outputs).
    client = MlflowClient(tracking_uri=mlflow_server)
    run = client.get_run(run_id)
    (logged,) = client.search_logged_models(experiment_ids=[run.info.experiment_id])
    assert logged.source_run_id == run_id and logged.name == "model" and logged.status.to_int() == 2  # READY
    assert [o.model_id for o in run.outputs.model_outputs] == [logged.model_id]
    assert run.info.status == "FINISHED"  # logging the model did not reopen the run

    files = _png_files(tracked_run, 5)
    expected = dmlplug.load_bundle(bundle).embed(_decoded(files))
    model = mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
    inputs, outputs = model.metadata.get_input_schema(), model.metadata.get_output_schema()
    assert inputs.input_names() == ["image"] and inputs.input_types() == [DataType.binary]
    assert outputs.inputs[0].shape == (-1, 8) and outputs.inputs[0].type == np.float32
    import pandas as pd

    predicted = model.predict(pd.DataFrame({"image": files}))
    assert predicted.dtype == np.float32 and predicted.shape == (5, 8)
    np.testing.assert_allclose(predicted, expected, rtol=0, atol=1e-6)

    # The second route: `mlflow models serve`, a real process; JSON carries the image files base64-encoded.
    served = _serve(f"runs:/{run_id}/model", tmp_path)
    try:
        body = json.dumps({"dataframe_split": {"columns": ["image"],
                                               "data": [[base64.b64encode(f).decode()] for f in files]}})
        request = urllib.request.Request(f"{served.url}/invocations", data=body.encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            predictions = np.asarray(json.loads(answer.read())["predictions"], dtype=np.float32)
    finally:
        mlflow_tracking.stop(served.process)
    np.testing.assert_allclose(predictions, expected, rtol=0, atol=1e-6)


class _Served:
    def __init__(self, process, url):
        self.process, self.url = process, url


def _serve(model_uri, folder):
    """``mlflow models serve`` of ``model_uri`` in this environment (no virtualenv, nothing installed)."""
    port = mlflow_tracking.free_port()
    log = folder / "serve.log"
    # As in an activated environment: MLflow's local backend runs `exec uvicorn` through the shell, found on PATH
    # (CI runs .venv/bin/python without activating the virtualenv).
    env = {**os.environ, "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}
    with open(log, "w") as handle:
        process = subprocess.Popen([sys.executable, "-m", "mlflow", "models", "serve", "-m", model_uri,
                                    "--env-manager", "local", "--host", "127.0.0.1", "--port", str(port),
                                    "--workers", "1"], stdout=handle, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        mlflow_tracking.wait_until_healthy(process, f"{url}/ping", log, "mlflow models serve")
    except BaseException:
        mlflow_tracking.stop(process)
        raise
    return _Served(process, url)


def test_without_log_model_export_logs_nothing(tracked_run, mlflow_server, tmp_path):
    from mlflow import MlflowClient

    import dmlplug

    client = MlflowClient(tracking_uri=mlflow_server)
    run = client.get_run(json.loads((tracked_run / "mlflow.json").read_text())["run_id"])
    before = {m.model_id for m in client.search_logged_models(experiment_ids=[run.info.experiment_id])}
    dmlplug.export(tracked_run, tmp_path / "bundle", format="torchscript", calibrate=False, images=0)
    after = {m.model_id for m in client.search_logged_models(experiment_ids=[run.info.experiment_id])}
    assert after == before


def test_an_unreachable_server_keeps_the_bundle_and_says_how_to_log_it_later(tracked_run, tmp_path):
    import dmlplug
    from dmlplug.bundle.errors import BundleError

    moved = tmp_path / "run"
    shutil.copytree(tracked_run, moved)
    state = json.loads((moved / "mlflow.json").read_text())
    state["tracking_uri"] = f"http://127.0.0.1:{mlflow_tracking.free_port()}"  # nothing listens there
    (moved / "mlflow.json").write_text(json.dumps(state))
    bundle = tmp_path / "bundle"
    with pytest.raises(BundleError) as info:
        dmlplug.export(moved, bundle, format="torchscript", calibrate=False, images=0, log_model=True)
    message = info.value.render()
    assert f"the bundle {bundle} was written and verified (it stays)" in message
    assert f"the model was not logged: the MLflow tracking server {state['tracking_uri']} does not answer" in message
    assert f"dmlplug export {moved} --out NEW_FOLDER --log-model" in message
    assert dmlplug.load_bundle(bundle).embedding_size == 8  # the bundle is whole


# ------------------------------------------------------------------------------------------ without a server


def test_a_masked_password_comes_from_the_environment(monkeypatch):
    from dmlplug_builtins.loggers.mlflow_model import _usable_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert _usable_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"  # nothing masked: as stored
    # mlflow.json keeps no password: MLflow then reads MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD ...
    assert _usable_uri("https://ann:***@mlflow.internal:5000/x") == "https://mlflow.internal:5000/x"
    # ... or MLFLOW_TRACKING_URI, when it is the stored URI with its password.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://ann:s3cret@mlflow.internal:5000/x")
    assert _usable_uri("https://ann:***@mlflow.internal:5000/x") == "https://ann:s3cret@mlflow.internal:5000/x"
    assert _usable_uri("https://bob:***@other.internal/x") == "https://other.internal/x"


def test_without_pandas_the_error_says_what_to_install(tmp_path, monkeypatch):
    from dmlplug.bundle.errors import BundleError
    from dmlplug_builtins.loggers.mlflow_model import log_bundle

    monkeypatch.setitem(sys.modules, "pandas", None)  # as with dmlplug[mlflow] alone: mlflow-skinny lacks pandas
    with pytest.raises(BundleError) as info:
        log_bundle(tmp_path / "bundle", {}, tmp_path / "run")
    message = info.value.render()
    assert "logging a bundle as an MLflow model needs pandas, which is not installed" in message
    assert "pip install pandas" in message and f"dmlplug export {tmp_path / 'run'} --out NEW_FOLDER" in message


def test_logging_leaves_the_callers_mlflow_tracking_uri_as_it_was(monkeypatch):
    import mlflow

    from dmlplug_builtins.loggers.mlflow_model import _tracking_uri

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1/callers")
    with _tracking_uri("http://127.0.0.1:2/runs"):
        assert mlflow.get_tracking_uri() == "http://127.0.0.1:2/runs"
    assert mlflow.get_tracking_uri() == os.environ["MLFLOW_TRACKING_URI"] == "http://127.0.0.1:1/callers"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    with _tracking_uri("http://127.0.0.1:2/runs"):
        pass
    assert "MLFLOW_TRACKING_URI" not in os.environ
    assert mlflow.get_tracking_uri() != "http://127.0.0.1:2/runs"  # MLflow's default again
