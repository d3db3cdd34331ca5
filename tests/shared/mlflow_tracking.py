"""A real MLflow tracking server on a free loopback port, for the tests of the ``mlflow`` logger and its models.

Test modules import the fixture (``from mlflow_tracking import mlflow_server``); it is module-scoped, so a module's
tests share one server (xdist's loadscope runs them on one worker).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_healthy(process: subprocess.Popen, url: str, log: Path, what: str, seconds: float = 180) -> None:
    """Poll ``url`` until it answers 200; fail with the process's ``log`` file when it exits or never answers.

    ``seconds`` only guards against a hang (a server that never comes up), far above its usual few seconds.
    """
    deadline = time.time() + seconds
    while True:
        assert process.poll() is None, f"{what} exited:\n" + log.read_text()
        assert time.time() < deadline, f"{what} did not answer:\n" + log.read_text()
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.5)


def stop(process: subprocess.Popen) -> None:
    """Terminate ``process`` (kill it when it does not end within 30 s)."""
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """``mlflow server`` on a free local port, SQLite backend, artifacts proxied over HTTP (mlflow-artifacts:/)."""
    folder = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    with open(folder / "server.log", "w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{folder}/mlflow.db",
             "--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
             "--workers", "1"], stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_healthy(server, f"{uri}/health", folder / "server.log", "the MLflow server")
            yield uri
        finally:
            stop(server)
