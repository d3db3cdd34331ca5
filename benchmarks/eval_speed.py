"""dmlplug's exact kNN metrics vs pytorch-metric-learning's AccuracyCalculator: time, peak memory, values.

Each measurement runs in a fresh subprocess on the same saved embeddings, so the peak resident set size
(``ru_maxrss``) of one library is not inflated by the other. Both compute precision_at_1 (= recall@1),
mean_average_precision_at_r and r_precision with the exact search of their default backend
(PML: k="max_bin_count"; dmlplug: backend "auto"). A third process times one bare ``faiss.knn`` call with
PML's k and no metrics: the brute-force floor that any exact evaluation on this machine pays.

Usage::

    python benchmarks/eval_speed.py                    # cub, sop128, sop512, gallery1m
    python benchmarks/eval_speed.py --sets sop128      # one set
    python benchmarks/eval_speed.py --sets gallery1m --budget-mb 512
    python benchmarks/eval_speed.py --sets cub --repeats 5   # alternate the variants 5 times, medians
    python benchmarks/eval_speed.py --quick                  # smoke run: cub, one repeat
    python benchmarks/eval_speed.py --sets sop128 --no-pml --no-torch   # dmlplug against the floor only
    python benchmarks/eval_speed.py --sets cub --threads 1   # one thread: CPU time, less disturbed by load

Variants run alternately (dmlplug, PML, faiss, dmlplug on a torch tensor with the torch backend, ...) and
each time is the median over ``--repeats`` rounds, so a loaded machine slows all of them alike. Every worker
reports its wall time and its process CPU time; ``--threads N`` caps faiss, BLAS and torch at N threads
(``--threads 1``: the CPU time is the work done, which a shared machine disturbs far less than wall time).
``--no-pml`` leaves PML out (it needs ~7.5 GB and minutes on the SOP-size sets); values are then compared
with the torch-backend variant's, which must be identical, unless ``--no-torch`` leaves that out too.

The ``gallery1m`` set is a query/gallery evaluation (2,000 queries, 1,000,000 gallery items, D=128)
run by dmlplug only, within the given memory budget.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

#: name -> (items, dim, min class size, max class size, queries (0 = leave-one-out), noise)
SETS = {
    "cub": (6000, 512, 25, 35, 0, 2.5),
    "sop128": (60000, 128, 2, 8, 0, 1.5),
    "sop512": (60000, 512, 2, 8, 0, 1.5),
    "gallery1m": (1_000_000, 128, 2, 8, 2000, 1.5),
}

PML_KEYS = {"precision_at_1": "recall@1", "mean_average_precision_at_r": "map@r", "r_precision": "r_precision"}


def make_set(n: int, dim: int, lo: int, hi: int, noise: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Clustered unit vectors: class centres plus noise, class sizes uniform in [lo, hi]."""
    rng = np.random.default_rng(seed)
    sizes = []
    while sum(sizes) < n:
        sizes.append(int(rng.integers(lo, hi + 1)))
    sizes[-1] -= sum(sizes) - n
    if sizes[-1] < 1:
        sizes.pop()
    labels = np.repeat(np.arange(len(sizes), dtype=np.int64) * 7919 + 2**25, sizes)  # ids above 2**24
    centres = rng.standard_normal((len(sizes), dim), dtype=np.float32)
    x = np.repeat(centres, sizes, axis=0)
    x += rng.standard_normal(x.shape, dtype=np.float32) * np.float32(noise)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    perm = rng.permutation(n)
    return np.ascontiguousarray(x[perm]), labels[perm]


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(kind: str, data: Path, queries: int, budget_mb: float | None, threads: int | None) -> dict:
    x = np.load(data / "x.npy")
    y = np.load(data / "y.npy")
    if threads:
        import faiss
        import torch

        faiss.omp_set_num_threads(threads)
        torch.set_num_threads(threads)
    if kind == "faiss":
        import faiss

        # The floor: one bare exact search with PML's k (largest class size + 1), no metrics at all.
        k = int(np.unique(y, return_counts=True)[1].max()) + 1
        base = peak_rss_mb()
        t0, c0 = time.perf_counter(), time.process_time()
        faiss.knn(x, x, k)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        values, backend = {}, f"faiss.knn k={k}"
    elif kind == "pml":
        import torch
        from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

        base = peak_rss_mb()
        calc = AccuracyCalculator(include=tuple(PML_KEYS), k="max_bin_count", device=torch.device("cpu"))
        t0, c0 = time.perf_counter(), time.process_time()
        raw = calc.get_accuracy(torch.from_numpy(x), torch.from_numpy(y))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        values = {PML_KEYS[k]: float(v) for k, v in raw.items()}
        backend = "faiss (PML)"
    else:
        import faiss  # noqa: F401  (imported before the baseline, as PML imports them)
        import torch

        from dmlplug.evaluation import EvalContext, run_evaluators
        from dmlplug_builtins.evaluators.retrieval import RetrievalEvaluator

        options = {}
        if queries:
            q = np.zeros(len(x), dtype=bool)
            q[:queries] = True
            options = {"query_mask": q, "gallery_mask": ~q}
        backend = "auto"
        if kind == "dmlplug-torch":  # the device path (tensor + torch backend), here on the CPU
            x, backend = torch.from_numpy(x), "torch"
        base = peak_rss_mb()
        t0, c0 = time.perf_counter(), time.process_time()
        ctx = EvalContext(x, y, memory_budget_mb=budget_mb, backend=backend, **options)
        evaluator = RetrievalEvaluator([("recall", 1), ("map_r", None), ("r_precision", None)])
        values = run_evaluators([evaluator], ctx)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        backend = ctx.backend_used
        values["reranked_queries"] = float(ctx.search_stats.reranked)
    return {"kind": kind, "seconds": elapsed, "cpu_seconds": cpu, "peak_rss_mb": peak_rss_mb(), "baseline_rss_mb": base,
            "values": values, "backend": backend}


def run_worker(kind: str, data: Path, queries: int, budget_mb: float | None, threads: int | None) -> dict:
    cmd = [sys.executable, __file__, "--worker", kind, "--data", str(data), "--queries", str(queries)]
    if budget_mb is not None:
        cmd += ["--budget-mb", str(budget_mb)]
    env = dict(os.environ)
    if threads:  # set before the libraries load: OpenMP and every BLAS read these once
        cmd += ["--threads", str(threads)]
        env.update({v: str(threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default="cub,sop128,sop512,gallery1m")
    parser.add_argument("--budget-mb", type=float, default=None)
    parser.add_argument("--worker", choices=["pml", "dmlplug", "dmlplug-torch", "faiss"])
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds; times are medians")
    parser.add_argument("--quick", action="store_true", help="smoke run: the cub set, one round")
    parser.add_argument("--threads", type=int, default=None, help="cap faiss/BLAS/torch threads (default: all)")
    parser.add_argument("--no-pml", action="store_true", help="leave PML out (dmlplug against the floor only)")
    parser.add_argument("--no-torch", action="store_true", help="leave the torch-backend variant out")
    parser.add_argument("--data")
    parser.add_argument("--queries", type=int, default=0)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, Path(args.data), args.queries, args.budget_mb, args.threads)))
        return
    if args.quick:
        args.sets, args.repeats = "cub", 1
    threads = f"{args.threads} thread(s)" if args.threads else f"the {os.cpu_count()} visible cores"
    print(f"threads: torch/faiss/BLAS use {threads}; medians of {args.repeats} alternating rounds; "
          f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for name in args.sets.split(","):
        n, dim, lo, hi, queries, noise = SETS[name]
        with tempfile.TemporaryDirectory() as tmp:
            x, y = make_set(n, dim, lo, hi, noise)
            np.save(Path(tmp) / "x.npy", x)
            np.save(Path(tmp) / "y.npy", y)
            del x
            kinds = ["dmlplug"] if queries else ["dmlplug", "pml", "faiss", "dmlplug-torch"]
            kinds = [k for k in kinds if not (k == "pml" and args.no_pml or k == "dmlplug-torch" and args.no_torch)]
            rounds = [{k: run_worker(k, Path(tmp), queries, args.budget_mb, args.threads) for k in kinds}
                      for _ in range(max(1, args.repeats))]
            medians = {k: _median_run([r[k] for r in rounds]) for k in kinds}
            cpu = {k: float(np.median([r[k]["cpu_seconds"] for r in rounds])) for k in kinds}
            ours, theirs, floor = medians["dmlplug"], medians.get("pml"), medians.get("faiss")
            device_path = medians.get("dmlplug-torch")
        print(f"\n== {name}: N={n} D={dim} class sizes {lo}-{hi}" + (f", {queries} queries" if queries else ""))
        for r in (ours, theirs, floor, device_path):
            if r is None:
                continue
            print(f"  {r['kind']:8s} {r['seconds']:7.2f} s (CPU {cpu[r['kind']]:6.2f} s)  "
                  f"peak RSS {r['peak_rss_mb']:8.0f} MiB "
                  f"(after imports+data {r['baseline_rss_mb']:.0f})  backend {r['backend']}  "
                  + "  ".join(f"{k}={v:.6f}" for k, v in r["values"].items()))
        if theirs is not None:
            same = all(abs(ours["values"][k] - theirs["values"][k]) < 1e-9 for k in PML_KEYS.values())
            extra_ours = ours["peak_rss_mb"] - ours["baseline_rss_mb"]
            extra_theirs = max(1.0, theirs["peak_rss_mb"] - theirs["baseline_rss_mb"])
            print(f"  ratio dmlplug/PML: time {ours['seconds'] / theirs['seconds']:.2f}x, "
                  f"peak RSS {ours['peak_rss_mb'] / theirs['peak_rss_mb']:.2f}x, "
                  f"RSS growth during the evaluation {extra_ours / extra_theirs:.2f}x, identical values: {same}")
            print(f"  a bare faiss search alone takes {floor['seconds'] / theirs['seconds']:.2f}x PML's time")
        if floor is not None:
            print(f"  dmlplug / bare faiss search (the floor): wall time {ours['seconds'] / floor['seconds']:.3f}x, "
                  f"CPU time {cpu['dmlplug'] / cpu['faiss']:.3f}x")
            print("  per round, wall: " + "  ".join(f"{r['dmlplug']['seconds'] / r['faiss']['seconds']:.3f}x"
                                                 for r in rounds)
                  + "; CPU: " + "  ".join(f"{r['dmlplug']['cpu_seconds'] / r['faiss']['cpu_seconds']:.3f}x"
                                           for r in rounds))
        if device_path is not None:
            same_device = all(device_path["values"][k] == ours["values"][k] for k in PML_KEYS.values())
            print(f"  torch backend on a tensor / faiss-cpu: time {device_path['seconds'] / ours['seconds']:.2f}x, "
                  f"identical values: {same_device}")


def _median_run(runs: list[dict]) -> dict:
    """The run with the median time (values are the same in every round)."""
    return sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]


if __name__ == "__main__":
    main()
