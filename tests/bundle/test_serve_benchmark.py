"""benchmarks/serve_throughput.py: its verdict and batching-gain lines against hand-made rows, and a --quick run on
the bundle tests' ONNX bundle (real servers, the real bare loop) whose bare loop answers the queries as the server
does and whose metric deltas see one image per model call without batching."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))  # the script imports its sibling serve_client.py, as when run
    try:
        spec = importlib.util.spec_from_file_location("serve_throughput", BENCHMARKS / "serve_throughput.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def rows(**images_s):
    """Rows at concurrency 8 from ``variant=images/s`` (underscores for spaces and dashes)."""
    return [{"concurrency": 8, "variant": name.replace("_", "-"), "summary": {"images_s": value}}
            for name, value in images_s.items()]


def test_headline_states_the_target_verdict_and_the_gain_of_batching(bench):
    lines = bench.headline(rows(bare=90.0, **{"bare, 1 thread": 100.0}, batched=60.0, one_at_a_time=24.0), target=0.8)
    # against the faster bare loop: 60 / 100 = 0.60 < 0.8, 80 images/s needed, 33 % more than 60; batching 60 / 24
    assert lines == ["target: served (batched) / the faster bare loop at concurrency 8 = 0.60x (>= 0.8x): NOT met (it "
                     "needs 33% more images/s)",
                     "batching gain at concurrency 8: 2.50x the images/s of one image per model call"]
    assert bench.headline(rows(bare=100.0, batched=85.0), target=0.8) == [
        "target: served (batched) / the faster bare loop at concurrency 8 = 0.85x (>= 0.8x): met"]


def test_quick_run_bare_loop_matches_the_server(bench, onnx_bundle, image_folder, tmp_path):
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "serve_throughput.py"), "--quick", "--bundle",
                           str(onnx_bundle), "--gallery", str(image_folder), "--json", str(out)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    # the hand-written preprocessing, session and flat index rank the gallery as the server does
    assert result["check"]["queries"] == 8 and result["check"]["max_abs_similarity_gap"] < 1e-4
    phases = {(row["concurrency"], row["variant"]): row for row in result["rows"]}
    assert set(phases) == {(c, v) for c in (1, 4) for v in ("bare", "batched", "one-at-a-time", bench.FLOOR)}
    assert all(run["images"] > 0 for row in result["rows"] for run in row["rounds"])
    assert phases[4, "one-at-a-time"]["summary"]["batch"] == 1.0  # /metrics: one image per model call
    assert phases[4, "bare"]["summary"]["batch"] == 4.0
    assert result["headline"][-1].startswith("batching gain at concurrency 4: ")


def test_cpu_budget_is_what_the_target_leaves_the_server_with_every_core_busy(bench, monkeypatch):
    monkeypatch.setattr(bench, "CORES", 2)
    table = rows(bare=1000.0, batched=500.0)
    table[1]["summary"].update(server_cpu_ms=1.5, client_cpu_us=100.0)
    table.append({"concurrency": 32, "variant": "batched", "summary": {"images_s": 600.0, "server_cpu_ms": 1.2}})
    table.append({"concurrency": 8, "variant": bench.FLOOR, "summary": {"images_s": 4000.0, "server_cpu_ms": 0.1}})
    table.append({"concurrency": 8, "variant": "bare, 1 thread",
                  "summary": {"images_s": 900.0, "stages_us": {"onnxruntime": 450.0}}})
    # 0.8 x 1000 (the faster bare loop) = 800 images/s on 2 cores: 2.5 ms per image, 2.4 after the client's 0.1
    assert bench.cpu_budget(table, 0.8) == (
        "CPU budget at concurrency 8: 0.8x is 800 images/s, 2.50 ms of the 2 cores per image with none ever idle; "
        "less the client's 0.10, the server may spend 2.40 ms per image. It spends 1.50 (batched); least of all "
        "phases 1.20 (batched, concurrency 32); the HTTP floor alone 0.10 ms per request; the model alone 0.45 ms "
        "per image (bare, 1 thread)")
    assert bench.cpu_budget(rows(bare=1000.0, batched=500.0), 0.8) is None  # no CPU measured
