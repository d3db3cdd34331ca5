"""The service's Prometheus metrics, written by prometheus-client in its text format at ``GET /metrics``.

Each app has its own registry (two apps in one process, as in tests, do not share counts). With several
worker processes (``--workers N``) every worker writes its samples to ``PROMETHEUS_MULTIPROC_DIR``, which the
command creates, and ``/metrics`` sums them over the workers: whichever worker answers, the counts are the
service's.
"""

from __future__ import annotations

import os
import time
from typing import Any

#: Seconds: request latency buckets, from a cached small query to a large batch on a slow CPU.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: The stages a search request's time is split into.
STAGES = ("decode", "embed", "search", "rerank")


class ServiceMetrics:
    """Request counts, latencies per stage, batch sizes and the index's size and codec."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        common: dict[str, Any] = {"registry": None if self.multiprocess else self.registry, "namespace": "dmlplug"}
        self.requests = Counter("http_requests", "HTTP requests answered, by route and status code.",
                                ["route", "method", "status"], **common)
        self.latency = Histogram("http_request_duration_seconds", "Time to answer a request, by route.",
                                 ["route"], buckets=LATENCY_BUCKETS, **common)
        self.stage = Histogram("stage_duration_seconds", "Time of one stage of a request: decode, embed, "
                               "search or rerank (embed: the wait for its batch, the preprocessing and the "
                               "model call; not the decoding).",
                               ["stage"], buckets=LATENCY_BUCKETS, **common)
        #: The stage histograms by stage name, labelled once (a ``labels()`` look-up per request costs more).
        self.stages = {name: self.stage.labels(stage=name) for name in STAGES}
        self.batch_size = Histogram("embed_batch_size", "Images per model call (dynamic batching).",
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), **common)
        self.model_seconds = Histogram("embed_batch_duration_seconds", "Time of one model call.",
                                       buckets=LATENCY_BUCKETS, **common)
        self.index_items = Gauge("index_items", "Vectors in the served index.",
                                 multiprocess_mode="mostrecent", **common)
        self.index_codec = Gauge("index_info", "The served index's codec (the label; the value is 1).", ["codec"],
                                 multiprocess_mode="mostrecent", **common)
        if self.multiprocess:
            from prometheus_client import multiprocess

            multiprocess.MultiProcessCollector(self.registry)

    def observe_batch(self, size: int, seconds: float) -> None:
        """Record one model call."""
        self.batch_size.observe(size)
        self.model_seconds.observe(seconds)

    def describe_index(self, items: int, codec: str) -> None:
        """Record the served index's size and codec."""
        self.index_items.set(items)
        self.index_codec.labels(codec=codec).set(1)  # an index keeps its codec through edits: one label

    def render(self) -> tuple[bytes, str]:
        """The text exposition and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class CountRequests:
    """ASGI middleware: every HTTP request counted by route, method and status, and its latency observed.

    A plain ASGI wrapper rather than FastAPI's ``@app.middleware("http")``, whose request/response streaming
    through a task group costs more than a small search itself. The route is the one Starlette's router matched
    (its path template, so ids do not make new series); ``answered`` counts the requests answered.

    Args:
        app: The wrapped ASGI app.
        metrics: Where to count.
        answered: A one-element list incremented per request answered (said when the worker stops).
    """

    def __init__(self, app: Any, metrics: ServiceMetrics, answered: list[int]):
        self.app = app
        self.metrics = metrics
        self.answered = answered
        self._children: dict[tuple[str, str, str], tuple[Any, Any]] = {}  # labelled series, looked up once

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Pass the request on, then count it with the status it was answered with (500 if none was sent)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def send_status(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            key = (getattr(scope.get("route"), "path", "unmatched"), scope["method"], str(status[0]))
            if key not in self._children:
                self._children[key] = (self.metrics.requests.labels(route=key[0], method=key[1], status=key[2]),
                                       self.metrics.latency.labels(route=key[0]))
            count, latency = self._children[key]
            count.inc()
            latency.observe(time.perf_counter() - started)
            self.answered[0] += 1
