"""Index codecs against exact search: bytes per vector in memory and on disk, recall@1/@10 on held-out queries,
queries/s, build time and peak memory, on a synthetic clustered gallery (1M × 128 by default) and on the glyph test
split of a trained run.

Each codec is built in its own process (``dmlplug.bundle.index.build_from``, the code ``dmlplug index`` runs, the
codec picked from the plugin host's registry as ``--codec`` picks it), so its peak resident memory (``VmHWM`` of
that process: the gallery, the index and the build's working memory) is its own. Queries/s: queries searched for
their top 10 in one batch (fresh ones on the synthetic gallery, the first 1,000 test images on the glyph split), the
best of at least three searches (repeated for up to 2 s when one takes milliseconds), printed with its ratio to the
exact (float32) index of the same gallery in the same run.

    python benchmarks/index_codecs.py                                   # 1M × 128 synthetic
    python benchmarks/index_codecs.py --synthetic 0 --run runs/quickstart   # the glyph test split of a run
    python benchmarks/index_codecs.py --codecs float32,binary,binary:rescore_from=int8,pq:pq_m=64,nlist=100

``--codecs`` lists ``--codec`` specs separated by commas (an item ``key=value`` without a ``:`` continues the
spec before it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CODECS = "float32,float16,int8,binary,binary:rescore_from=int8,binary:rescore_from=none,pq,ivf"


def synthetic(n: int, dim: int, centers: int, seed: int) -> np.ndarray:
    """``n`` unit vectors around ``centers`` seeded centres (centre and noise of equal expected norm)."""
    middle = np.random.default_rng(0).standard_normal((centers, dim)).astype(np.float32)
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, 100_000):  # in chunks: a float64 1M × 128 draw alone would take 1 GiB
        stop = min(n, start + 100_000)
        x = middle[rng.integers(0, centers, stop - start)] + rng.standard_normal((stop - start, dim),
                                                                                 dtype=np.float32)
        out[start:stop] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def child(args: argparse.Namespace) -> None:
    """Build one codec's index of the gallery and time its search; print one JSON line."""
    from dmlplug.bundle.codec_spec import pick_codec
    from dmlplug.bundle.index import MemoryGallery, build_from
    from dmlplug.plugins import get_host

    if args.data.endswith(".npz"):
        with np.load(args.data) as data:
            gallery, queries = data["gallery"], data["queries"]
    else:
        n, dim, centers = (int(v) for v in args.data.split("x"))
        gallery, queries = synthetic(n, dim, centers, seed=1), synthetic(args.queries, dim, centers, seed=2)
    start = time.perf_counter()
    codec = pick_codec(args.child, get_host().registry)
    index = build_from(MemoryGallery(gallery, [str(i) for i in range(len(gallery))]), codec)
    build = time.perf_counter() - start
    index.search(queries[:10], 10)  # warm-up
    times: list[float] = []
    while len(times) < 3 or (sum(times) < 2.0 and len(times) < 200):  # a small gallery's ms-long search: repeat
        start = time.perf_counter()
        index.search(queries, 10)
        times.append(time.perf_counter() - start)
    info = index.info
    print(json.dumps({"codec": args.child, "peak_rss_gib": peak_rss_gib(),
                      "memory": info["memory_bytes_per_vector"], "disk": info["disk_bytes_per_vector"],
                      "recall@1": info.get("recall@1"), "recall@10": info.get("recall@10"),
                      "held_out": info.get("recall_queries"), "qps": len(queries) / min(times), "build_s": build,
                      "params": {k: v for k, v in info.items() if k in ("nlist", "nprobe", "pq_m", "pq_nbits",
                                                                        "rescore", "rescore_from", "ef_search")}}))


def peak_rss_gib() -> float:
    """This process's peak resident memory, ``VmHWM`` of its own address space.

    Not ``ru_maxrss`` from ``wait4``: Linux folds the high-water mark of the address space a child replaced at
    ``exec`` into it, and that is the parent's (with the glyph run's model loaded, ~0.8 GiB for every codec).
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20  # kB
    raise RuntimeError("no VmHWM in /proc/self/status")


def run_codec(codec: str, data: str, queries: int) -> dict:
    """One child process; its JSON line (with its own peak RSS)."""
    cmd = [sys.executable, __file__, "--child", codec, "--data", data, "--queries", str(queries)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False)
    if proc.returncode:
        raise SystemExit(f"{codec} failed (exit {proc.returncode}): {' '.join(cmd)}")
    result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    print(json.dumps(result), flush=True)  # each codec as it finishes: a long run's partial results survive
    return result


def report(title: str, rows: list[dict]) -> None:
    """Print the codecs' rows, with their ratios to float32 (the first row when float32 was not run)."""
    exact = next((r for r in rows if r["codec"] == "float32"), rows[0])
    print(f"\n{title}")
    print(f"{'codec':<26} {'memory B/vec':>12} {'vs f32':>7} {'disk B/vec':>10} {'recall@1':>9} {'recall@10':>9} "
          f"{'queries/s':>10} {'vs f32':>7} {'build s':>8} {'peak RSS GiB':>12}  parameters")
    for r in rows:
        print(f"{r['codec']:<26} {r['memory']:>12.1f} {r['memory'] / exact['memory']:>7.3f} {r['disk']:>10.1f} "
              f"{r['recall@1']:>9.4f} {r['recall@10']:>9.4f} {r['qps']:>10.0f} {r['qps'] / exact['qps']:>7.2f} "
              f"{r['build_s']:>8.1f} {r['peak_rss_gib']:>12.2f}  {r['params'] or ''}")
    print(f"(recall on {exact['held_out']} held-out gallery vectors; queries/s: top 10 of fresh queries, one batch)")


def glyph_embeddings(run: Path, folder: Path) -> str:
    """The test split of a trained run, embedded by its model: gallery = all, queries = the first 1000."""
    import dmlplug
    from dmlplug.engine.data import TransformedSource, embed_loader, eval_loader

    loaded = dmlplug.load_run(run)
    loader = eval_loader(TransformedSource(loaded.dataset.test, loaded.test_transform), batch_size=256, workers=0,
                         device="cpu")
    embeddings, _ = embed_loader(loaded.model, loader, "cpu")
    vectors = np.asarray(embeddings, dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    path = folder / "glyphs.npz"
    np.savez(path, gallery=vectors, queries=vectors[:1000])
    return str(path)


def split_specs(text: str) -> list[str]:
    """``--codecs``' specs: split at commas, a ``key=value`` item without ``:`` joined to the spec before it."""
    specs: list[str] = []
    for item in text.split(","):
        if "=" in item and ":" not in item and specs:
            specs[-1] += "," + item
        else:
            specs.append(item)
    return specs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--synthetic", type=int, default=1_000_000, help="gallery size (0: none)")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--centers", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--codecs", default=CODECS)
    parser.add_argument("--run", type=Path, help="a trained run whose test split is indexed too")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    codecs = split_specs(args.codecs)
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at start")
    with tempfile.TemporaryDirectory() as tmp:
        if args.run:
            data = glyph_embeddings(args.run, Path(tmp))
            with np.load(data) as loaded:
                shape = loaded["gallery"].shape
            report(f"glyph test split of {args.run}: {shape[0]} × {shape[1]}",
                   [run_codec(c, data, args.queries) for c in codecs])
        if args.synthetic:
            data = f"{args.synthetic}x{args.dim}x{args.centers}"
            report(f"synthetic: {args.synthetic} × {args.dim}, {args.centers} clusters, {args.queries} fresh queries",
                   [run_codec(c, data, args.queries) for c in codecs])
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
