"""`dmlplug serve` under load and stop: 2,000 mixed requests at concurrency 16 without an error, and a SIGTERM that
lets every request the app accepted finish (the server says how many it answered; each got its answer). A
connection still in the kernel's queue when the listening socket closes was never accepted: its client sees the
connection closed, and the counts show that no request the server took is among them."""

from __future__ import annotations

import collections
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from serve import Server

from dmlplug.cli import main as dmlplug_main

REQUESTS, CONCURRENCY = 2000, 16


@pytest.fixture(scope="module")
def site(onnx_bundle, image_folder, tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve_load")
    shutil.copytree(image_folder, folder / "gallery")
    try:
        dmlplug_main(["index", str(onnx_bundle), str(folder / "gallery"), "--out", str(folder / "index"), "--quiet"])
    except SystemExit as exc:
        assert not exc.code
    return folder


def _mixed(url, gallery):
    """The request of number ``i``: searches by image and by vector, embeddings, health and readiness."""
    images = sorted(gallery.rglob("*.png"))
    vector = np.ones(8) / np.sqrt(8)

    def send(client, i):
        kind = i % 5
        if kind in (0, 1):
            path = images[i % len(images)]
            return "search image", client.post(url + "v1/search", files=[("images", (path.name, path.read_bytes(),
                                                                                    "image/png"))],
                                               data={"k": "5"})
        if kind == 2:
            return "search vector", client.post(url + "v1/search", json={"vectors": [vector.tolist()], "k": 5})
        if kind == 3:
            path = images[(3 * i) % len(images)]
            return "embed", client.post(url + "v1/embed", files=[("images", (path.name, path.read_bytes(),
                                                                            "image/png"))])
        return "health", client.get(url + ("healthz" if i % 2 else "readyz"))

    return send


def test_2000_mixed_requests_at_concurrency_16_without_an_error(onnx_bundle, site, capsys):
    latencies: dict[str, list[float]] = collections.defaultdict(list)
    failures = []
    with Server(onnx_bundle, site / "index", log=site / "load.log") as server:
        send = _mixed(server.url, site / "gallery")
        local = threading.local()

        def one(i):
            client = getattr(local, "client", None) or httpx.Client(timeout=120)
            local.client = client
            started = time.perf_counter()
            kind, response = send(client, i)
            latencies[kind].append(time.perf_counter() - started)
            if response.status_code != 200:
                failures.append((kind, response.status_code, response.text[:200]))

        started = time.perf_counter()
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            list(pool.map(one, range(REQUESTS)))
        elapsed = time.perf_counter() - started
        metrics = httpx.get(server.url + "metrics").text
        assert server.stop() == 0
    assert not failures, failures[:5]
    assert sum(len(v) for v in latencies.values()) == REQUESTS
    with capsys.disabled():  # the latency histogram, in the test's output (pytest -s shows it; -q keeps it short)
        print(f"\n{REQUESTS} requests at concurrency {CONCURRENCY} in {elapsed:.1f} s ({REQUESTS / elapsed:.0f}/s):")
        for kind, values in sorted(latencies.items()):
            p50, p99 = np.percentile(np.array(values) * 1000, [50, 99])
            print(f"  {kind:<14} {len(values):>5}  p50 {p50:7.1f} ms  p99 {p99:7.1f} ms")
        print("  server's model batch sizes: " + " ".join(
            line.split("{")[1].replace('le="', "≤").replace('"}', ":") for line in metrics.splitlines()
            if line.startswith("dmlplug_embed_batch_size_bucket") and "+Inf" not in line))
    assert 'route="/v1/search",status="200"' in metrics


def test_sigterm_during_load_loses_no_accepted_request(onnx_bundle, site):
    outcomes: collections.Counter[str] = collections.Counter()
    stop_sending = threading.Event()
    with Server(onnx_bundle, site / "index", "--max-wait-ms", "20", log=site / "term.log") as server:
        send = _mixed(server.url, site / "gallery")

        def worker(offset):
            i = offset
            while not stop_sending.is_set():
                # One connection per request: a request is either refused at connect (the server stopped
                # listening) or accepted; an accepted one must get its answer.
                with httpx.Client(timeout=120, headers={"Connection": "close"}) as client:
                    try:
                        _, response = send(client, i)
                        outcomes[str(response.status_code)] += 1
                    except httpx.ConnectError:
                        outcomes["refused"] += 1
                        stop_sending.set()
                    except httpx.TransportError:
                        # Connected, then closed without an answer: a connection the kernel had queued when the
                        # server closed its listening socket, which the server never took (the count below
                        # tells the two apart: a request the app took and dropped would be answered, not 200).
                        outcomes["closed before taken"] += 1
                        stop_sending.set()
                i += CONCURRENCY

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(CONCURRENCY)]
        for thread in threads:
            thread.start()
        time.sleep(3.0)
        code = server.stop(signal.SIGTERM)
        stop_sending.set()
        for thread in threads:
            thread.join()
        said, probes = server.stderr(), server.answered_while_starting
    assert code == 0
    answered = sum(int(line.rsplit("answering ", 1)[1].split()[0]) for line in said.splitlines()
                   if "stopped after answering" in line)
    assert set(outcomes) <= {"200", "refused", "closed before taken"}, outcomes  # never an error status
    # Every request the app took was answered, and every answer reached its client: the server's count of the
    # requests it answered equals the client's count of 200s (plus the readiness probes of the start).
    assert outcomes["200"] > 0 and answered == outcomes["200"] + probes
