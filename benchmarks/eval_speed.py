"""dmlplug's exact kNN metrics vs pytorch-metric-learning's AccuracyCalculator: time, peak memory, values.

Each measurement runs in a subprocess of its own on the same saved embeddings, so the peak resident set size
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
    python benchmarks/eval_speed.py --sets cub --repeats 11 --no-pml --no-torch --warm   # warm calls
    python benchmarks/eval_speed.py --sets cub --warm --no-pml --no-torch --before /tmp/old   # paired before/after

Variants run alternately (dmlplug, PML, faiss, dmlplug on a torch tensor with the torch backend, ...) and
each time is the median over ``--repeats`` rounds, so a loaded machine slows all of them alike. Every worker
reports its wall time and its process CPU time; ``--threads N`` caps faiss, BLAS and torch at N threads
(``--threads 1``: the CPU time is the work done, which a shared machine disturbs far less than wall time).
``--warm`` times warm calls instead of each process's first: one long-lived process per variant loads the set,
makes one untimed call (imports, first-use set-ups, page faults), then the variants are asked for one timed call
each in turn, the order reversed every round — what an engine pays at its second and later evaluations.
``--before DIR`` adds the ``dmlplug`` package found in ``DIR`` as one more alternating variant (a paired
before/after on the same loaded machine). ``--no-pml`` leaves PML out (it needs ~7.5 GB and minutes on the
SOP-size sets); values are then compared with the torch-backend variant's, which must be identical, unless
``--no-torch`` leaves that out too. The floor's process imports faiss alone (no torch, no dmlplug).

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
from collections.abc import Callable
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


def prepare(kind: str, data: Path, queries: int, budget_mb: float | None, threads: int | None) -> Callable[[], dict]:
    """Load the set and the kind's libraries; return the call that evaluates once (what is timed)."""
    x = np.load(data / "x.npy")
    y = np.load(data / "y.npy")
    if threads:
        import faiss

        faiss.omp_set_num_threads(threads)
        if kind != "faiss":  # the floor imports nothing but faiss
            import torch

            torch.set_num_threads(threads)
    if kind == "faiss":
        import faiss

        # The floor: one bare exact search with PML's k (largest class size + 1: the depth MAP@R and R-precision
        # read, the query itself included), no metrics, no dmlplug code.
        k = int(np.unique(y, return_counts=True)[1].max()) + 1

        def call() -> dict:
            faiss.knn(x, x, k)
            return {"values": {}, "backend": f"faiss.knn k={k}"}
        return call
    if kind == "pml":
        import torch
        from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

        calc = AccuracyCalculator(include=tuple(PML_KEYS), k="max_bin_count", device=torch.device("cpu"))
        x_t, y_t = torch.from_numpy(x), torch.from_numpy(y)

        def call() -> dict:
            raw = calc.get_accuracy(x_t, y_t)
            return {"values": {PML_KEYS[k]: float(v) for k, v in raw.items()}, "backend": "faiss (PML)"}
        return call
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

    def call() -> dict:
        ctx = EvalContext(x, y, memory_budget_mb=budget_mb, backend=backend, **options)
        evaluator = RetrievalEvaluator([("recall", 1), ("map_r", None), ("r_precision", None)])
        values = run_evaluators([evaluator], ctx)
        values["reranked_queries"] = float(ctx.search_stats.reranked)
        return {"values": values, "backend": ctx.backend_used}
    return call


def timed(kind: str, call: Callable[[], dict], base: float) -> dict:
    """One call with its wall and process CPU time, peak RSS and the RSS before it."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = call()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"kind": kind, "seconds": elapsed, "cpu_seconds": cpu, "peak_rss_mb": peak_rss_mb(), "baseline_rss_mb": base,
            **out}


def worker(kind: str, data: Path, queries: int, budget_mb: float | None, threads: int | None) -> dict:
    """A cold measurement: the first call of a fresh process (one JSON line)."""
    call = prepare(kind, data, queries, budget_mb, threads)
    return timed(kind, call, peak_rss_mb())


def serve(kind: str, data: Path, queries: int, budget_mb: float | None, threads: int | None) -> None:
    """Warm measurements: one untimed call, then one timed call (a JSON line) per line read from stdin."""
    call = prepare(kind, data, queries, budget_mb, threads)
    call()
    base = peak_rss_mb()
    print(json.dumps({"ready": kind}), flush=True)
    for _ in sys.stdin:
        print(json.dumps(timed(kind, call, base)), flush=True)


def _command(kind: str, data: Path, queries: int, budget_mb: float | None, threads: int | None,
             warm: bool, before: str | None = None) -> tuple[list[str], dict[str, str]]:
    cmd = [sys.executable, __file__, "--worker", kind, "--data", str(data), "--queries", str(queries)]
    if warm:
        cmd.append("--serve")
    if budget_mb is not None:
        cmd += ["--budget-mb", str(budget_mb)]
    env = dict(os.environ)
    if threads:  # set before the libraries load: OpenMP and every BLAS read these once
        cmd += ["--threads", str(threads)]
        env.update({v: str(threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    if kind == "dmlplug-before":  # another checkout's dmlplug package, found first
        env["PYTHONPATH"] = os.pathsep.join(p for p in (before, env.get("PYTHONPATH")) if p)
    return cmd, env


def run_worker(kind: str, data: Path, queries: int, budget_mb: float | None, threads: int | None,
               before: str | None = None) -> dict:
    cmd, env = _command(kind, data, queries, budget_mb, threads, warm=False, before=before)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def warm_rounds(kinds: list[str], data: Path, queries: int, budget_mb: float | None, threads: int | None,
                repeats: int, before: str | None = None) -> list[dict[str, dict]]:
    """Rounds of warm calls: one long-lived process per kind, asked in turn (the order reversed every round)."""
    procs = {}
    try:
        for kind in kinds:
            cmd, env = _command(kind, data, queries, budget_mb, threads, warm=True, before=before)
            procs[kind] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        for kind, proc in procs.items():  # every process loaded and warmed up before the first timed call
            assert proc.stdout is not None and json.loads(proc.stdout.readline()) == {"ready": kind}
        rounds = []
        for r in range(repeats):
            results = {}
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                proc = procs[kind]
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write("run\n")
                proc.stdin.flush()
                results[kind] = json.loads(proc.stdout.readline())
            rounds.append(results)
        return rounds
    finally:
        for proc in procs.values():
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default="cub,sop128,sop512,gallery1m")
    parser.add_argument("--budget-mb", type=float, default=None)
    parser.add_argument("--worker", choices=["pml", "dmlplug", "dmlplug-torch", "faiss", "dmlplug-before"])
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds; times are medians")
    parser.add_argument("--quick", action="store_true", help="smoke run: the cub set, one round")
    parser.add_argument("--threads", type=int, default=None, help="cap faiss/BLAS/torch threads (default: all)")
    parser.add_argument("--no-pml", action="store_true", help="leave PML out (dmlplug against the floor only)")
    parser.add_argument("--no-torch", action="store_true", help="leave the torch-backend variant out")
    parser.add_argument("--warm", action="store_true",
                        help="time warm calls: one process per variant, one untimed call, then alternating calls")
    parser.add_argument("--before", metavar="DIR",
                        help="also time the dmlplug package found in DIR (e.g. `git archive HEAD~1 dmlplug | tar -x "
                             "-C DIR`), alternating with the others: a paired before/after")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data")
    parser.add_argument("--queries", type=int, default=0)
    args = parser.parse_args()
    if args.worker and args.serve:
        serve(args.worker, Path(args.data), args.queries, args.budget_mb, args.threads)
        return
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
            if args.before:
                kinds.append("dmlplug-before")
            if args.warm:
                rounds = warm_rounds(kinds, Path(tmp), queries, args.budget_mb, args.threads, max(1, args.repeats),
                                     args.before)
            else:
                rounds = [{k: run_worker(k, Path(tmp), queries, args.budget_mb, args.threads, args.before)
                           for k in kinds} for _ in range(max(1, args.repeats))]
            medians = {k: _median_run([r[k] for r in rounds]) for k in kinds}
            cpu = {k: float(np.median([r[k]["cpu_seconds"] for r in rounds])) for k in kinds}
            ours, theirs, floor = medians["dmlplug"], medians.get("pml"), medians.get("faiss")
            device_path = medians.get("dmlplug-torch")
            previous = medians.get("dmlplug-before")
        print(f"\n== {name}: N={n} D={dim} class sizes {lo}-{hi}" + (f", {queries} queries" if queries else "")
              + ("; warm calls" if args.warm else "; first call of a fresh process"))
        num_queries = queries or n
        rss_note = "after the warm-up call" if args.warm else "after imports+data"
        for r in (ours, previous, theirs, floor, device_path):
            if r is None:
                continue
            print(f"  {r['kind']:8s} {r['seconds'] * 1e3:8.1f} ms = {r['seconds'] / num_queries * 1e6:6.1f} µs/query "
                  f"(CPU {cpu[r['kind']] * 1e3:8.1f} ms)  peak RSS {r['peak_rss_mb']:6.0f} MiB "
                  f"({rss_note} {r['baseline_rss_mb']:.0f})  backend {r['backend']}  "
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
            wall = [r["dmlplug"]["seconds"] / r["faiss"]["seconds"] for r in rounds]
            cpu_ratio = [r["dmlplug"]["cpu_seconds"] / r["faiss"]["cpu_seconds"] for r in rounds]
            print(f"  dmlplug / bare faiss search (the floor): wall time {ours['seconds'] / floor['seconds']:.3f}x "
                  f"({ours['seconds'] * 1e3:.1f} ms against {floor['seconds'] * 1e3:.1f} ms), "
                  f"CPU time {cpu['dmlplug'] / cpu['faiss']:.3f}x; median of the per-round ratios: "
                  f"wall {np.median(wall):.3f}x, CPU {np.median(cpu_ratio):.3f}x")
            print("  per round, wall: " + "  ".join(f"{v:.3f}x" for v in wall)
                  + "; CPU: " + "  ".join(f"{v:.3f}x" for v in cpu_ratio))
        if previous is not None:
            change = [r["dmlplug"]["seconds"] / r["dmlplug-before"]["seconds"] for r in rounds]
            change_cpu = [r["dmlplug"]["cpu_seconds"] / r["dmlplug-before"]["cpu_seconds"] for r in rounds]
            same_before = all(previous["values"][k] == ours["values"][k] for k in PML_KEYS.values())
            line = (f"  dmlplug / dmlplug --before: median of the per-round ratios: wall {np.median(change):.3f}x, "
                    f"CPU {np.median(change_cpu):.3f}x, identical values: {same_before}")
            if floor is not None:
                before_floor = [r["dmlplug-before"]["seconds"] / r["faiss"]["seconds"] for r in rounds]
                line += f"; --before / the floor: wall {np.median(before_floor):.3f}x"
            print(line)
        if device_path is not None:
            same_device = all(device_path["values"][k] == ours["values"][k] for k in PML_KEYS.values())
            print(f"  torch backend on a tensor / faiss-cpu: time {device_path['seconds'] / ours['seconds']:.2f}x, "
                  f"identical values: {same_device}")


def _median_run(runs: list[dict]) -> dict:
    """The run with the median time (values are the same in every round)."""
    return sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]


if __name__ == "__main__":
    main()
