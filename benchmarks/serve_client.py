"""The served side of benchmarks/serve_throughput.py: a ``dmlplug serve`` process, a lean client, the metrics.

The client is what a load generator does cheaply: one asyncio connection per concurrent request, kept alive, every
request built before the clock starts, answers split by httptools' C parser but not parsed as JSON.
Its own CPU time is measured (it shares the cores with the server), and so is the server's (its processes, from
``/proc``); the server's ``/metrics`` before and after a phase split a request's time into its stages.
"""

from __future__ import annotations

import asyncio
import http.client
import itertools
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

URL_LINE = re.compile(r"dmlplug serve: (http://127\.0\.0\.1:\d+/)")
BOUNDARY = "dmlplug-bench-boundary"
#: Seconds of quiet before each phase: what the phase before left running (spinning thread pools) settles.
PAUSE = 0.2

class Served:
    """A ``dmlplug serve BUNDLE INDEX --port 0`` process (the idea of tests/shared/serve.py), ready on ``url``."""

    def __init__(self, bundle: Path, index: Path, options: list[str], log: Path, timeout: float = 300.0):
        self.log = log
        with open(log, "wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "dmlplug", "serve", str(bundle), str(index), "--port", "0",
                 "--log-level", "warning", *options], stdout=subprocess.DEVNULL, stderr=err,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"dmlplug serve exited {self.process.returncode}:\n{log.read_text()}")
            found = URL_LINE.search(log.read_text(errors="replace"))
            if found and self._ready(found.group(1)):
                self.url = found.group(1)
                return
            time.sleep(0.2)
        self.stop()
        raise SystemExit(f"dmlplug serve was not ready within {timeout} s:\n{log.read_text()}")

    @staticmethod
    def _ready(url: str) -> bool:
        try:
            return get(url, "/readyz")[0] == 200
        except OSError:
            return False

    def metrics(self) -> dict[str, float]:
        """``/metrics`` as ``{"name{labels}": value}``."""
        text = get(self.url, "/metrics")[1].decode()
        return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S+) (\S+)$", text, re.M)}

    def cpu_seconds(self) -> float:
        """CPU time of the server and its worker processes so far."""
        return tree_cpu(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


#: The HTTP floor: FastAPI on uvicorn (the server's stack, httptools and uvloop when installed) answering
#: ``POST /v1/search`` with a constant once it has read the body; no form is split, no image decoded, no model
#: run. What one request costs the same client and the same stack before any work of the server's own.
FLOOR_APP = """
import sys, uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response
app = FastAPI()
ANSWER = b'{"threshold": null, "results": [{"query": "q", "matches": []}]}'
@app.post("/v1/search")
async def search(request: Request) -> Response:
    await request.body()
    return Response(ANSWER, media_type="application/json")
@app.get("/readyz")
async def readyz() -> dict:
    return {"status": "ready"}
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


class Floor(Served):
    """A uvicorn process serving :data:`FLOOR_APP` (no ``/metrics``: measured with :func:`drive` alone)."""

    def __init__(self, log: Path, timeout: float = 120.0):  # noqa: D107 - the parent's, without a bundle
        import socket

        with socket.socket() as probe:  # a free port (uvicorn prints none when given 0)
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.log, self.url = log, f"http://127.0.0.1:{port}/"
        with open(log, "wb") as err:
            self.process = subprocess.Popen([sys.executable, "-c", FLOOR_APP, str(port)], stdout=subprocess.DEVNULL,
                                            stderr=err)
        deadline = time.monotonic() + timeout
        while not self._ready(self.url):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"the HTTP floor's server did not start:\n{log.read_text()}")
            time.sleep(0.2)


def measure_floor(server: Floor, bodies: list[bytes], concurrency: int, seconds: float) -> dict:
    """One timed phase of the HTTP floor, with its server's CPU time per request."""
    time.sleep(PAUSE)
    cpu = server.cpu_seconds()
    row = drive(server.url, bodies, concurrency, seconds)
    row.update(server_cpu_ms=(server.cpu_seconds() - cpu) / row["images"] * 1e3, batch=1.0)
    return row


def tree_cpu(pid: int) -> float:
    """User + system seconds of ``pid`` and its living descendants (Linux ``/proc``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        children = [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                    for c in (task / "children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return total + sum(tree_cpu(child) for child in children)


def get(url: str, path: str) -> tuple[int, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def multipart(name: str, data: bytes, k: int) -> bytes:
    """A ``POST /v1/search`` body: one image in the ``images`` field and ``k``."""
    head = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"k\"\r\n\r\n{k}\r\n--{BOUNDARY}\r\n"
            f"Content-Disposition: form-data; name=\"images\"; filename=\"{name}\"\r\nContent-Type: image/png\r\n\r\n")
    return head.encode() + data + f"\r\n--{BOUNDARY}--\r\n".encode()


def post(conn: http.client.HTTPConnection, body: bytes) -> tuple[int, bytes]:
    conn.request("POST", "/v1/search", body, {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
    response = conn.getresponse()
    return response.status, response.read()


def drive(url: str, bodies: list[bytes], concurrency: int, seconds: float) -> dict:
    """``concurrency`` keep-alive connections send requests (cycling over ``bodies``) until ``seconds`` have passed.

    One asyncio event loop (uvloop when installed) in this thread drives every connection; each request's bytes,
    headers included, are built before the clock starts, and answers are split by httptools' response parser (C),
    so the client's own CPU per request stays small beside the server's on the same cores.
    """
    parts = urlsplit(url)
    head = (f"POST /v1/search HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
            f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n")
    requests = [f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body for body in bodies]
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    cpu = time.process_time()
    latencies, failures, elapsed = runner(_drive(parts.hostname, parts.port, requests, concurrency, seconds))
    cpu = time.process_time() - cpu
    if failures:
        raise SystemExit(f"{len(failures)} of {len(latencies)} requests failed, e.g. {failures[0]}")
    return {"images": len(latencies), "images_s": len(latencies) / elapsed, "elapsed": elapsed,
            "p50_ms": percentile(latencies, 50) * 1e3, "p99_ms": percentile(latencies, 99) * 1e3,
            "mean_ms": sum(latencies) / len(latencies) * 1e3, "client_cpu_us": cpu / len(latencies) * 1e6}


class _Connection(asyncio.Protocol):
    """One keep-alive connection: :meth:`send` writes a request and returns ``(status, body)`` once answered."""

    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.answer: asyncio.Future[tuple[int, bytes]] | None = None
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(ConnectionError(f"the server closed the connection: {exc}"))

    # httptools' callbacks
    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        assert self.answer is not None
        self.answer.set_result((self.parser.get_status_code(), b"".join(self.body)))

    async def send(self, request: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        self.body = []
        self.answer = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self.answer


async def _drive(host: str, port: int, requests: list[bytes], concurrency: int,
                 seconds: float) -> tuple[list[float], list[str], float]:
    loop = asyncio.get_running_loop()
    connections = [(await loop.create_connection(_Connection, host, port))[1] for _ in range(concurrency)]
    latencies: list[float] = []
    failures: list[str] = []
    numbers = itertools.count()
    started = time.perf_counter()
    deadline = started + seconds

    async def client(connection: _Connection) -> None:
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            status, body = await connection.send(requests[next(numbers) % len(requests)])
            latencies.append(time.perf_counter() - t0)
            if status != 200:
                failures.append(f"{status}: {body[:200]!r}")

    await asyncio.gather(*(client(connection) for connection in connections))
    elapsed = time.perf_counter() - started
    for connection in connections:
        assert connection.transport is not None
        connection.transport.close()
    return latencies, failures, elapsed


def measure_served(server: Served, bodies: list[bytes], concurrency: int, seconds: float) -> dict:
    """One timed phase of a server, with its ``/metrics`` deltas per request and its CPU time per image."""
    time.sleep(PAUSE)
    before, cpu = server.metrics(), server.cpu_seconds()
    row = drive(server.url, bodies, concurrency, seconds)
    cpu = server.cpu_seconds() - cpu
    after = server.metrics()

    def delta(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    n = delta('dmlplug_http_request_duration_seconds_count{route="/v1/search"}') or 1.0
    stages = {stage: delta(f'dmlplug_stage_duration_seconds_sum{{stage="{stage}"}}') / n * 1e3
              for stage in ("decode", "embed", "search")}
    app = delta('dmlplug_http_request_duration_seconds_sum{route="/v1/search"}') / n * 1e3
    batches = delta("dmlplug_embed_batch_size_count") or 1.0
    row.update(stages_ms={**stages, "rest of the app": app - sum(stages.values()),
                          "outside the app": row["mean_ms"] - app},
               model_ms_per_batch=delta("dmlplug_embed_batch_duration_seconds_sum") / batches * 1e3,
               batch=delta("dmlplug_embed_batch_size_sum") / batches, server_cpu_ms=cpu / row["images"] * 1e3)
    return row


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile, linear between the closest ranks (numpy's default)."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))
