"""``dmlplug export --log-model`` for a run of the ``mlflow`` logger: the bundle as a model of the same MLflow run.

The run's ``mlflow.json`` (written by the logger) names the tracking server and the MLflow run. The bundle folder is
logged as an MLflow pyfunc model named ``model``, linked to that run: images in, embeddings out
(:class:`~dmlplug_builtins.loggers.mlflow_pyfunc.BundleModel`, loaded by the code of :mod:`.mlflow_model_code`), with a
signature and an example request. ``mlflow.pyfunc.load_model("runs:/<run id>/model")`` and ``mlflow models serve -m
runs:/<run id>/model`` load it. Nothing is inferred over the network: the pip requirements are written out (dmlplug at
the bundle's version, and onnxruntime for an ONNX bundle), no code is collected (the model runs the installed dmlplug).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import io
import json
import os
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dmlplug.bundle.errors import BundleError
from dmlplug.secrets import MASK, mask_secrets
from dmlplug_builtins.loggers.mlflow_logger import STATE_FILE
from dmlplug_builtins.loggers.mlflow_server import probe

#: The model's name in its MLflow run (``runs:/<run id>/model``).
MODEL_NAME = "model"
#: The file MLflow executes to load the model (models from code: no pickled object in the model).
MODEL_CODE = Path(__file__).with_name("mlflow_model_code.py")


def log_bundle(bundle: Path, manifest: Mapping[str, Any], run_dir: Path) -> str:
    """Log ``bundle`` as a pyfunc model of the MLflow run of ``run_dir``; return the line ``dmlplug export`` prints.

    Raises:
        BundleError: ``mlflow.json`` is unreadable, the tracking server does not answer or refuses, or it does not
            have the run; the fix says how to log the (written, valid) bundle later.
    """
    state_file = run_dir / STATE_FILE
    later = (f"then log the bundle by exporting again: dmlplug export {run_dir} --out NEW_FOLDER --log-model (or "
             "export without --log-model)")
    _require_packages(later)
    run_id, stored = _tracked_run(state_file)
    uri, shown = _usable_uri(stored), mask_secrets(stored)
    problem = probe(uri)  # seconds, where the client would retry for minutes
    if problem is not None:
        raise BundleError(f"the model was not logged: the MLflow tracking server {shown} does not answer: {problem}",
                          where=str(state_file),
                          fix=f"start the server at that address (it holds the run's MLflow run {run_id}); {later}")
    try:
        model_uri = _log(bundle, manifest, run_id, uri)
    except Exception as exc:  # a refused request, a run deleted on the server, a full artifact store …
        first = mask_secrets((str(exc).strip().splitlines() or [type(exc).__name__])[0][:300])
        credentials = "" if MASK not in stored else (
            "the run directory keeps no password: set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or "
            "MLFLOW_TRACKING_URI with the password); ")
        raise BundleError(f"the model was not logged to MLflow run {run_id} on {shown}: {first}",
                          where=str(state_file),
                          fix=f"{credentials}check that the server still has the run; {later}") from exc
    return f"mlflow: logged the bundle as the model runs:/{run_id}/{MODEL_NAME} ({model_uri}) on {shown}"


def _require_packages(later: str) -> None:
    """MLflow and pandas (MLflow's pyfunc models take DataFrames; ``dmlplug[mlflow]``'s mlflow-skinny lacks it)."""
    missing = [name for name in ("mlflow", "pandas") if importlib.util.find_spec(name) is None]
    if missing:
        raise BundleError(f"the model was not logged: logging a bundle as an MLflow model needs {' and '.join(missing)}"
                          ", which is not installed", where="dmlplug export --log-model",
                          fix=f"pip install pandas (and \"dmlplug[mlflow]\"), or the full mlflow package; {later}")


def _tracked_run(state_file: Path) -> tuple[str, str]:
    """``(run id, tracking URI)`` as the run's ``mlflow.json`` names them (a password in the URI is masked)."""
    try:
        state = json.loads(state_file.read_text())
        run_id, stored = str(state["run_id"]), str(state["tracking_uri"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BundleError(f"the model was not logged: {state_file} does not name the run's MLflow run "
                          f"({type(exc).__name__}: {exc})", where=str(state_file),
                          fix="export without --log-model (the bundle is written)") from None
    return run_id, stored


def _usable_uri(stored: str) -> str:
    """The tracking URI to log to: the stored one, whose masked credentials come from the environment.

    A run directory keeps no password (``user:***@host``, :mod:`dmlplug.secrets`): then ``MLFLOW_TRACKING_URI`` when
    it is the same URI with the password, else the URI without credentials, and MLflow takes them from
    ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``.
    """
    parts = urllib.parse.urlsplit(stored)
    if MASK not in (parts.password or ""):
        return stored
    bare = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    configured = os.environ.get("MLFLOW_TRACKING_URI", "")
    if configured and mask_secrets(configured) == stored:
        return configured
    return bare


def _log(bundle: Path, manifest: Mapping[str, Any], run_id: str, uri: str) -> str:
    """Log the model (its artifacts uploaded through the tracking server) and return its ``models:/`` URI."""
    import mlflow.pyfunc
    from mlflow import MlflowClient
    from mlflow.models import Model

    from dmlplug_builtins.loggers.mlflow_pyfunc import BUNDLE_ARTIFACT

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    # Created here, in the run's experiment: MLflow would otherwise put it in the active (default) experiment.
    created = client.create_logged_model(experiment_id=run.info.experiment_id, name=MODEL_NAME,
                                         source_run_id=run_id, tags=_tags(manifest))
    with _tracking_uri(uri):  # Model.log talks to MLflow's process-wide tracking URI
        info = Model.log(artifact_path=None, name=MODEL_NAME, flavor=mlflow.pyfunc, run_id=run_id,
                         model_id=created.model_id, python_model=str(MODEL_CODE),
                         artifacts={BUNDLE_ARTIFACT: str(bundle)}, signature=signature(manifest),
                         input_example=input_example(manifest), pip_requirements=requirements(manifest),
                         infer_code_paths=False)
    return str(info.model_uri)


def signature(manifest: Mapping[str, Any]) -> Any:
    """The model's signature: a binary ``image`` column in, ``N×D`` float32 embeddings out."""
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema, TensorSpec

    from dmlplug_builtins.loggers.mlflow_pyfunc import IMAGE_COLUMN

    return ModelSignature(inputs=Schema([ColSpec("binary", IMAGE_COLUMN)]),
                          outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, int(manifest["embedding_size"])),
                                                     "embedding")]))


def input_example(manifest: Mapping[str, Any]) -> Any:
    """One mid-grey PNG of the bundle's input size, as the model's example input.

    MLflow runs the model on it before uploading the model, and stores it as the example request
    (``serving_input_example.json``: the JSON ``/invocations`` takes).
    """
    import pandas as pd
    from PIL import Image

    from dmlplug_builtins.loggers.mlflow_pyfunc import IMAGE_COLUMN

    height, width = manifest["input_size"][-2:]
    buffer = io.BytesIO()
    Image.new("RGB", (int(width), int(height)), (128, 128, 128)).save(buffer, format="PNG")
    return pd.DataFrame({IMAGE_COLUMN: [buffer.getvalue()]})


def requirements(manifest: Mapping[str, Any]) -> list[str]:
    """The pip requirements of serving the model elsewhere: dmlplug of the bundle, onnxruntime for ONNX."""
    wanted = [f"dmlplug=={manifest['dmlplug_version']}"]
    if manifest["model"]["format"] == "onnx":
        wanted.append(_pinned("onnxruntime"))
    return wanted


def _pinned(distribution: str) -> str:
    try:
        return f"{distribution}=={importlib.metadata.version(distribution)}"
    except importlib.metadata.PackageNotFoundError:
        return distribution


def _tags(manifest: Mapping[str, Any]) -> dict[str, str]:
    source = manifest.get("source") or {}
    return {"dmlplug.model_format": str(manifest["model"]["format"]),
            "dmlplug.embedding_size": str(manifest["embedding_size"]),
            "dmlplug.checkpoint_sha256": str(source.get("checkpoint_sha256")),
            "dmlplug.model_sha256": str(manifest["model"]["sha256"])}


@contextmanager
def _tracking_uri(uri: str) -> Iterator[None]:
    """MLflow's process-wide tracking URI set to ``uri`` for a while, then MLflow's own lookup again.

    ``mlflow.set_tracking_uri`` also sets ``MLFLOW_TRACKING_URI``; afterwards the URI is unset and the variable put
    back as it was, so the caller of :func:`dmlplug.export` resolves the same tracking URI as before (a URI it set
    with ``mlflow.set_tracking_uri`` is in that variable too).
    """
    import mlflow

    saved_env = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        # None unsets the URI and the variable (what MLflow's own code does; its annotation says str only).
        mlflow.set_tracking_uri(None)  # type: ignore[arg-type]
        if saved_env is not None:
            os.environ["MLFLOW_TRACKING_URI"] = saved_env
