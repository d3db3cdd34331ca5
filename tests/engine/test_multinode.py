"""Two "nodes" on the loopback address: ``torchrun --nnodes 2 --nproc-per-node 1`` with a c10d rendezvous.

Two torchrun agents, started as separate processes, meet at a c10d rendezvous on ``127.0.0.1`` and run one
2-rank gloo job. Each "node" has its own working directory and its own dataset cache, and the run directory
is given relative to the working directory, so whatever a rank writes lands under its own node's folder —
the same as two machines without a shared filesystem. The job must end with the weights and metrics of the
single-process run (what ``test_distributed.py`` proves for ``--nnodes 1 --nproc-per-node 2``), and only
global rank 0 may write: exactly one run directory, on rank 0's node, none on the other.

The notebook route of docs/distributed.md, ``elastic_launch(config, dmlplug.run)``, is run with 2 processes too.
"""

import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from test_distributed import DDP_SETS

pytestmark = pytest.mark.slow


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node(recipe, node_dir, port, host):
    """One torchrun agent of a 2-node job; ``host``: this agent runs the rendezvous store."""
    node_dir.mkdir()
    # GLOO_SOCKET_IFNAME keeps gloo on the loopback interface the rendezvous uses (by default it takes the
    # interface of the host name, which a sandbox need not route); on a cluster it names the interconnect.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DMLPLUG_CACHE": str(node_dir / "cache")}
    sets = [arg for pair in DDP_SETS for arg in ("--set", pair)]
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "dmlplug-test",
               # Both agents are on 127.0.0.1, so both would take themselves for the store's host (the second
               # then falls back to a client); naming the host makes that deterministic.
               "--rdzv-conf", f"is_host={int(host)}", "--max-restarts", "0",
               "-m", "dmlplug", "run", str(recipe), "--quiet", "--set", "run.output_dir=runs", *sets]
    return subprocess.Popen(command, cwd=node_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_two_nodes_on_loopback_run_one_job_and_rank0_alone_writes(tiny_recipe, tmp_path):
    import dmlplug

    single = dmlplug.run(tiny_recipe, overrides=DDP_SETS, out=tmp_path / "single", quiet=True)
    port = _free_port()
    nodes = [_node(tiny_recipe, tmp_path / f"node{i}", port, host=i == 0) for i in (0, 1)]
    outputs = []
    try:
        for proc in nodes:
            outputs.append(proc.communicate(timeout=600))
    finally:
        for proc in nodes:
            if proc.poll() is None:  # pragma: no cover - only after a timeout
                proc.kill()
                proc.communicate()
    for proc, (_, err) in zip(nodes, outputs, strict=True):
        assert proc.returncode == 0, err[-6000:]

    # Exactly one run directory, written by global rank 0, on its node; the other node wrote nothing there.
    written = [sorted((tmp_path / f"node{i}").glob("runs/tiny/*")) for i in (0, 1)]
    assert sorted(len(w) for w in written) == [0, 1], written
    run_dir = next(w[0] for w in written if w)
    other = tmp_path / f"node{1 - [bool(w) for w in written].index(True)}"
    assert not (other / "runs").exists()
    # Every rank returned the same (relative) run directory: rank 0 chose it and broadcast it.
    # (each rank's JSON summary is printed with its node's stdout, so each node shows one)
    reported = [json.loads("{" + line.strip().rstrip(",") + "}")["run_dir"] for out, _ in outputs
                for line in out.splitlines() if line.strip().startswith('"run_dir"')]
    assert len(reported) == 2 and len(set(reported)) == 1, reported
    assert not os.path.isabs(reported[0]) and run_dir.match(reported[0])

    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "completed" and results["steps"] == 3
    assert json.loads((run_dir / "environment.json").read_text())["world_size"] == 2
    assert [json.loads(line)["epoch"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()] == [0, 1]
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert state["world_size"] == 2
    reference = torch.load(tmp_path / "single" / "checkpoints" / "last.pt", weights_only=False)
    for name, value in reference["model"].items():
        torch.testing.assert_close(state["model"][name], value, rtol=1e-4, atol=1e-5, msg=name)
    assert results["initial_metrics"] == single.initial_metrics


def test_elastic_launch_runs_the_python_api_on_two_processes(tiny_recipe, tmp_path):
    """The notebook route (docs/distributed.md): ``elastic_launch(config, dmlplug.run)(recipe, overrides)``."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    import dmlplug

    single = dmlplug.run(tiny_recipe, overrides=DDP_SETS, out=tmp_path / "single", quiet=True)
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=2, rdzv_backend="c10d",
                          rdzv_endpoint=f"127.0.0.1:{_free_port()}", run_id="dmlplug-elastic", max_restarts=0,
                          monitor_interval=0.5)
    # The entry point is pickled into spawned processes: an importable function, not one defined in a notebook.
    launch = elastic_launch(config, dmlplug.run)
    results = launch(str(tiny_recipe), [*DDP_SETS, f"run.output_dir={tmp_path / 'runs'}"])
    assert sorted(results) == [0, 1]  # one RunResult per rank, returned to the launching process
    assert results[0].directory == results[1].directory
    assert results[0].metrics == results[1].metrics
    assert [p.name for p in (tmp_path / "runs" / "tiny").iterdir()] == [results[0].directory.name]
    assert results[0].initial_metrics == single.initial_metrics
    state = torch.load(results[0].directory / "checkpoints" / "last.pt", weights_only=False)
    reference = torch.load(tmp_path / "single" / "checkpoints" / "last.pt", weights_only=False)
    assert state["world_size"] == 2
    for name, value in reference["model"].items():
        torch.testing.assert_close(state["model"][name], value, rtol=1e-4, atol=1e-5, msg=name)
