"""``dmlplug serve`` against a bare ONNX Runtime + faiss loop: images/s and p50/p99 latency at concurrency 1, 8, 32.

Served: ``dmlplug serve BUNDLE INDEX`` as a real process, searched by a lean client in this process (one asyncio
event loop driving one keep-alive connection per concurrent request, every request built before the clock
starts, answers split by httptools' C parser; ~0.05 ms of CPU per request, against ~0.2 for the thread-per-
connection ``http.client`` client of earlier runs; it is measured and printed, since it shares the cores with
the server). Each request is one image, ``k`` = 10. Variants: dynamic batching (``--max-batch 32 --max-wait-ms 2``,
one worker with the default threads: all cores), one image per model call (``--max-batch 1``), and, at the
concurrencies of ``--thread-concurrency``, one worker and two workers with ``--threads 1`` each.

Bare: what a user writes by hand instead, in-process, with no dmlplug code: PIL decodes the same PNG bytes, numpy
applies the preprocessing that ``bundle.json`` records, ``onnxruntime.InferenceSession`` embeds (as many
intra-op threads as the served worker, and one thread), ``faiss.IndexFlatIP`` finds the top ``k`` over the same
gallery, embedded by this loop itself. Its batch size is the concurrency (at most ``--max-batch``); its latency is
the time of the batch an image is in. The floor a ratio ("x bare") divides by is the faster of the two bare loops.
Before timing, both sides answer the same queries and their top-``k`` similarities are compared (``check``), so the
floor does the server's work.

The HTTP floor (``http floor``): the same client against FastAPI on uvicorn answering ``POST /v1/search`` with a
constant once it has read the body (no form, no image, no model): the requests/s that HTTP alone allows on these
cores, a ceiling for any served variant.

The CPU budget line: the target's images/s at concurrency 8 allow ``cores / images/s`` of CPU per image with no
core ever idle; less the client's share, that is what the server may spend, printed beside what each served
phase spent (a ceiling of its images/s however well its event loop and model overlapped).

Per concurrency, each round runs the bare loops, then every served variant and the floor, each for ``--seconds``
(alternating; medians over ``--rounds``, spread min–max). The server's ``/metrics`` deltas split a request's time
into decode (on the event loop; a large upload's in the batch thread), embed (the wait for a batch included),
search and the rest in the app (the form, JSON); "outside" is the client's latency minus the app's time (HTTP in
uvicorn, the event loop's queue, the client).

Without ``--bundle`` the benchmark makes its own: the quickstart recipe (``--model``, ``--image-size``) at epoch 0
(random weights: speed does not depend on them), exported to ONNX, and ``--gallery-size`` PNGs of its glyph test
images at the model's input size, indexed with ``dmlplug index``.

Usage::

    python benchmarks/serve_throughput.py                                  # resnet10t, 32 px, 64-d
    python benchmarks/serve_throughput.py --model resnet50 --image-size 224 --seconds 8
    python benchmarks/serve_throughput.py --bundle BUNDLE --gallery DIR --json out.json
    python benchmarks/serve_throughput.py --quick                          # smoke run
"""

from __future__ import annotations

import argparse
import http.client
import io
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
from serve_client import PAUSE, Floor, Served, drive, measure_floor, measure_served, multipart, percentile, post

ROOT = Path(__file__).resolve().parents[1]
#: The variant name of the HTTP floor's rows (serve_client.FLOOR_APP).
FLOOR = "http floor (constant answer)"
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def serve_variants(max_batch: int, wait_ms: float) -> dict[str, list[str]]:
    """Served variant name -> the options of ``dmlplug serve``."""
    batched = ["--max-batch", str(max_batch), "--max-wait-ms", str(wait_ms)]
    return {"batched": batched, "one-at-a-time": ["--max-batch", "1"],
            "batched, 1 worker x 1 thread": [*batched, "--workers", "1", "--threads", "1"],
            "batched, 2 workers x 1 thread": [*batched, "--workers", "2", "--threads", "1"]}


# -- setup ---------------------------------------------------------------------------------------------------

def make_site(folder: Path, model: str, image_size: int, count: int) -> tuple[Path, Path]:
    """The quickstart recipe with ``model`` at ``image_size``, untrained, exported; ``count`` gallery PNGs."""
    from PIL import Image

    import dmlplug

    # 80 classes x 10 images: a test split of 300 glyphs, which the run evaluates once (minutes for ResNet-50)
    sets = ["run.epochs=0", "evaluation.initial=false", "loggers=[]", f"backbone.model={model}",
            f"data.image_size={image_size}", "data.dataset.num_classes=80", "data.dataset.images_per_class=10"]
    run = dmlplug.run(ROOT / "recipes" / "quickstart.toml", overrides=sets, out=folder / "run", quiet=True)
    bundle = folder / "bundle"
    dmlplug.export(run.directory, bundle, images=16, calibrate=False, allow_untrained=True)
    test = dmlplug.load_run(run.directory).dataset.test
    gallery = folder / "gallery"
    gallery.mkdir()
    for i in range(count):
        image = test.load_image(i % len(test)).convert("RGB")
        if image.size != (image_size, image_size):  # uploads at the model's size: a realistic decode
            image = image.resize((image_size, image_size), Image.BICUBIC)
        image.save(gallery / f"{i:05d}.png")
    return bundle, gallery


def build_index(bundle: Path, gallery: Path, out: Path) -> None:
    cmd = [sys.executable, "-m", "dmlplug", "index", str(bundle), str(gallery), "--out", str(out), "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr}")


# -- the bare loop ---------------------------------------------------------------------------------------------

class Bare:
    """PIL + numpy preprocessing from ``bundle.json``, ONNX Runtime sessions (one per thread count) and a faiss
    flat index."""

    RESAMPLE = {"nearest": 0, "bilinear": 2, "bicubic": 3, "lanczos": 1, "box": 4, "hamming": 5}

    def __init__(self, bundle: Path, gallery: list[Path], threads: list[int], k: int):
        import faiss
        import onnxruntime as ort

        manifest = json.loads((bundle / "bundle.json").read_text())
        self.steps = manifest["preprocessing"]["steps"]
        self.sessions = {}
        for count in threads:
            options = ort.SessionOptions()
            options.intra_op_num_threads, options.inter_op_num_threads = count, 1
            self.sessions[count] = ort.InferenceSession(str(bundle / manifest["model"]["file"]), options,
                                                        providers=["CPUExecutionProvider"])
        self.input, self.k = manifest["model"]["input"], k
        # A search of a few queries in a gallery of hundreds takes microseconds on one thread; faiss's OpenMP team
        # of all cores takes milliseconds to gather on a loaded machine, which would make this floor slower.
        faiss.omp_set_num_threads(1)
        blobs = [path.read_bytes() for path in gallery]
        vectors = np.concatenate([self.embed(blobs[i:i + 32], threads[0])[0] for i in range(0, len(blobs), 32)])
        self.index = faiss.IndexFlatIP(vectors.shape[1])
        self.index.add(vectors)

    def preprocess(self, data: bytes) -> np.ndarray:
        """One upload to a ``3×H×W`` float32 array, step by step as ``bundle.json`` lists them."""
        from PIL import Image

        image: object = Image.open(io.BytesIO(data)).convert("RGB")
        for step in self.steps:
            op = step["op"]
            if op in ("to_image", "to_pure_tensor"):
                continue  # torchvision's container steps: no arithmetic
            if op in ("to_float", "to_tensor"):
                image = np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / np.float32(255)
            elif op == "normalize":
                mean, std = (np.asarray(step[key], dtype=np.float32)[:, None, None] for key in ("mean", "std"))
                image = (image - mean) / std
            elif op == "resize" and isinstance(image, Image.Image):
                w, h = image.size
                size = step["size"]
                if isinstance(size, int):  # the shorter side
                    h, w = (size, round(w * size / h)) if h <= w else (round(h * size / w), size)
                else:
                    h, w = size
                image = image.resize((w, h), self.RESAMPLE[step["interpolation"]])
            elif op == "center_crop" and isinstance(image, Image.Image):
                (ch, cw), (w, h) = step["size"], image.size
                top, left = int(round((h - ch) / 2)), int(round((w - cw) / 2))
                image = image.crop((left, top, left + cw, top + ch))
            else:
                raise SystemExit(f"the bare loop does not implement preprocessing step {step}")
        return np.asarray(image, dtype=np.float32)

    def embed(self, blobs: list[bytes], threads: int) -> tuple[np.ndarray, float]:
        """Embeddings of a batch (the session of ``threads`` threads), and the seconds of decode + preprocessing."""
        started = time.perf_counter()
        batch = np.stack([self.preprocess(data) for data in blobs])
        decoded = time.perf_counter() - started
        return self.sessions[threads].run(None, {self.input: batch})[0], decoded

    def measure(self, blobs: list[bytes], batch: int, seconds: float, threads: int) -> dict:
        """Batches of ``batch`` images (cycling over ``blobs``) for ``seconds``: throughput, latency, stages."""
        time.sleep(PAUSE)
        latencies, stages, done = [], np.zeros(3), 0
        started = time.perf_counter()
        for first in itertools.count(0, batch):
            t0 = time.perf_counter()
            vectors, decoded = self.embed([blobs[(first + i) % len(blobs)] for i in range(batch)], threads)
            t1 = time.perf_counter()
            self.index.search(vectors, self.k)
            t2 = time.perf_counter()
            latencies.append(t2 - t0)
            stages += (decoded, t1 - t0 - decoded, t2 - t1)
            done += batch
            if t2 - started >= seconds and len(latencies) >= 3:
                break
        elapsed = time.perf_counter() - started
        return {"images": done, "images_s": done / elapsed, "p50_ms": percentile(latencies, 50) * 1e3,
                "p99_ms": percentile(latencies, 99) * 1e3, "batch": batch,
                "stages_us": dict(zip(("decode+preprocess", "onnxruntime", "faiss"), stages / done * 1e6, strict=True))}


# -- the run -------------------------------------------------------------------------------------------------

def summarise(rounds: list[dict]) -> dict:
    """Medians over rounds of every number of a phase, and the spread of images/s."""
    out = {key: statistics.median(r[key] for r in rounds) for key in rounds[0] if isinstance(rounds[0][key], float)}
    for key in ("stages_ms", "stages_us"):
        if key in rounds[0]:
            out[key] = {s: statistics.median(r[key][s] for r in rounds) for s in rounds[0][key]}
    out["batch"] = statistics.median(float(r["batch"]) for r in rounds)
    out["spread"] = [min(r["images_s"] for r in rounds), max(r["images_s"] for r in rounds)]
    return out


def check(servers: dict[str, Served], bare: Bare, blobs: list[bytes], names: list[str], k: int) -> dict:
    """Both sides answer the first queries one by one: the largest gap of their top-k similarities."""
    parts = urlsplit(servers["batched"].url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=300)
    gap = 0.0
    for name, data in zip(names, blobs, strict=True):
        status, body = post(conn, multipart(name, data, k))
        if status != 200:
            raise SystemExit(f"the check's request failed: {status} {body[:300]!r}")
        served = [m["similarity"] for m in json.loads(body)["results"][0]["matches"]]
        sims, _ = bare.index.search(bare.embed([data], CORES)[0], k)
        gap = max(gap, float(np.max(np.abs(np.asarray(served) - sims[0]))))
    conn.close()
    return {"queries": len(blobs), "max_abs_similarity_gap": gap}


def report(result: dict) -> None:
    print(f"\n{result['title']}")
    print(f"{'conc.':>5} {'variant':<30} {'images/s':>9} {'spread':>15} {'p50 ms':>8} {'p99 ms':>8} {'x bare':>7} "
          f"{'batch':>6} {'srv CPU ms/img':>14} {'client CPU us/req':>17}")
    for row in result["rows"]:
        s = row["summary"]
        print(f"{row['concurrency']:>5} {row['variant']:<30} {s['images_s']:>9.1f} "
              f"{s['spread'][0]:>7.1f}-{s['spread'][1]:<7.1f} {s['p50_ms']:>8.2f} {s['p99_ms']:>8.2f} "
              f"{row['ratio']:>7.2f} {s['batch']:>6.1f} {optional(s, 'server_cpu_ms', '.2f'):>14} "
              f"{optional(s, 'client_cpu_us', '.0f'):>17}")
    print("\nwhere a request's time goes (mean ms per request; bare: µs per image)")
    for row in result["rows"]:
        parts = row["summary"].get("stages_ms") or row["summary"].get("stages_us")
        if parts is None:  # the HTTP floor: no stages
            continue
        extra = f", model call {row['summary']['model_ms_per_batch']:.2f} ms/batch" if "stages_ms" in \
            row["summary"] else ""
        print(f"{row['concurrency']:>5} {row['variant']:<30} " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items())
              + extra)
    print()
    for line in result["headline"]:
        print(line)


def cpu_budget(rows: list[dict], target: float, concurrency: int = 8) -> str | None:
    """What the target leaves the server at ``concurrency``: CPU per image with every core busy, against its spending.

    ``target`` x the bare loop's images/s on ``CORES`` cores allows ``CORES / images/s`` of CPU per image if no core
    is ever idle; the client (on the same cores) takes its share, the server may spend the rest. Each served
    variant's measured server CPU per image is the ceiling of its images/s however well it overlapped: at more
    CPU than the budget it cannot meet the target. ``None`` without the rows it needs.
    """
    here = {r["variant"]: r["summary"] for r in rows if r["concurrency"] == concurrency}
    if "batched" not in here or "server_cpu_ms" not in here["batched"] or "client_cpu_us" not in here["batched"]:
        return None
    needed = target * floor(rows, concurrency)
    client_ms = here["batched"]["client_cpu_us"] / 1e3
    allowed = CORES / needed * 1e3 - client_ms
    spends = [r for r in rows if "server_cpu_ms" in r["summary"] and r["variant"] != FLOOR]
    least = min(spends, key=lambda r: r["summary"]["server_cpu_ms"])
    line = (f"CPU budget at concurrency {concurrency}: {target}x is {needed:.0f} images/s, {CORES / needed * 1e3:.2f} "
            f"ms of the {CORES} cores per image with none ever idle; less the client's {client_ms:.2f}, the server "
            f"may spend {allowed:.2f} ms per image. It spends {here['batched']['server_cpu_ms']:.2f} (batched); "
            f"least of all phases {least['summary']['server_cpu_ms']:.2f} ({least['variant']}, concurrency "
            f"{least['concurrency']})")
    if FLOOR in here and "server_cpu_ms" in here[FLOOR]:
        line += f"; the HTTP floor alone {here[FLOOR]['server_cpu_ms']:.2f} ms per request"
    model = here.get("bare, 1 thread", {}).get("stages_us", {}).get("onnxruntime")
    if model is not None:  # one thread: its wall time is its CPU time
        line += f"; the model alone {model / 1e3:.2f} ms per image (bare, 1 thread)"
    return line


def optional(summary: dict, key: str, spec: str) -> str:
    return format(summary[key], spec) if key in summary else "-"


def headline(rows: list[dict], target: float) -> list[str]:
    by = {(r["concurrency"], r["variant"]): r["summary"]["images_s"] for r in rows}
    lines = []
    if (8, "batched") in by:
        ratio = by[8, "batched"] / floor(rows, 8)
        verdict = "met" if ratio >= target else f"NOT met (it needs {(target / ratio - 1) * 100:.0f}% more images/s)"
        lines.append(f"target: served (batched) / the faster bare loop at concurrency 8 = {ratio:.2f}x (>= {target}x): "
                     f"{verdict}")
    if (8, FLOOR) in by:
        lines.append(f"HTTP floor at concurrency 8: {by[8, FLOOR]:.0f} requests/s (FastAPI on uvicorn answering a "
                     f"constant, the same client) = {by[8, FLOOR] / floor(rows, 8):.2f}x the faster bare loop's "
                     "images/s")
    budget = cpu_budget(rows, target)
    if budget:
        lines.append(budget)
    for c in sorted({c for c, _ in by}):
        if (c, "batched") in by and (c, "one-at-a-time") in by:
            lines.append(f"batching gain at concurrency {c}: {by[c, 'batched'] / by[c, 'one-at-a-time']:.2f}x "
                         "the images/s of one image per model call")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet10t", help="timm model of the bundle made (no --bundle)")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--gallery-size", type=int, default=300)
    parser.add_argument("--bundle", type=Path, help="an ONNX bundle to serve (with --gallery)")
    parser.add_argument("--gallery", type=Path, help="its gallery folder of PNGs (indexed here)")
    parser.add_argument("--queries", type=int, default=64, help="gallery images sent as queries, cycled")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--thread-concurrency", type=int, nargs="*", default=[8, 32],
                        help="concurrencies that also run 1 and 2 workers with --threads 1")
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=4.0, help="length of one timed phase")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--target", type=float, default=0.8)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 round, short phases, 2 variants")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.concurrency, args.thread_concurrency = 1, 0.3, [1, 4], []
        args.gallery_size, args.queries = min(args.gallery_size, 24), min(args.queries, 8)
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as tmp:
        work = Path(tmp)
        if args.bundle is None:
            args.bundle, args.gallery = make_site(work, args.model, args.image_size, args.gallery_size)
        elif args.gallery is None:
            raise SystemExit("--bundle needs --gallery")
        build_index(args.bundle, args.gallery, work / "index")
        manifest = json.loads((args.bundle / "bundle.json").read_text())
        gallery = sorted(args.gallery.rglob("*.png"))
        k = min(args.k, len(gallery))
        queries = gallery[:args.queries]
        blobs = [path.read_bytes() for path in queries]
        bodies = [multipart(path.name, data, k) for path, data in zip(queries, blobs, strict=True)]
        # the bare loop with the served worker's threads (all cores), and with one (as --threads 1)
        bare_threads = {"bare": CORES, **({"bare, 1 thread": 1} if args.thread_concurrency and CORES > 1 else {})}
        bare = Bare(args.bundle, gallery, list(bare_threads.values()), k=k)
        for c, threads in itertools.product(args.concurrency, bare_threads.values()):  # first run of each shape
            bare.measure(blobs, min(c, args.max_batch), 0.0, threads)
        variants = serve_variants(args.max_batch, args.max_wait_ms)
        if not args.thread_concurrency:
            variants = {name: variants[name] for name in ("batched", "one-at-a-time")}
        servers: dict[str, Served] = {}
        http_floor = None
        try:
            http_floor = Floor(work / "floor.log")
            drive(http_floor.url, bodies, 4, 0.5)
            for name, options in variants.items():
                servers[name] = Served(args.bundle, work / "index", options, work / f"{len(servers)}.log")
                drive(servers[name].url, bodies, 4, 0.5)  # warm-up: sessions, thread pools, first batches
            checked = check(servers, bare, blobs[:16], [p.name for p in queries[:16]], k)
            phases: dict[tuple[int, str], list[dict]] = {}
            for _ in range(args.rounds):
                for c in args.concurrency:
                    batch = min(c, args.max_batch)
                    for name, threads in bare_threads.items():
                        phases.setdefault((c, name), []).append(bare.measure(blobs, batch, args.seconds, threads))
                    for name, server in servers.items():
                        if "thread" not in name or c in args.thread_concurrency:
                            phases.setdefault((c, name), []).append(measure_served(server, bodies, c, args.seconds))
                    phases.setdefault((c, FLOOR), []).append(measure_floor(http_floor, bodies, c, args.seconds))
                load.append(os.getloadavg()[0])
        finally:
            for server in [*servers.values(), *([http_floor] if http_floor else [])]:
                server.stop()
    rows = [{"concurrency": c, "variant": name, "summary": summarise(runs), "rounds": runs}
            for (c, name), runs in phases.items()]
    for row in rows:
        row["ratio"] = row["summary"]["images_s"] / floor(rows, row["concurrency"])
    result = {"title": f"{manifest['source'].get('recipe_name')} bundle, input {manifest['input_size']}, "
                       f"{manifest['embedding_size']}-d; {len(gallery)} gallery images, {len(queries)} queries "
                       f"({np.mean([len(b) for b in blobs]) / 1024:.1f} KiB PNG), k={k}; {CORES} cores; "
                       f"{args.rounds} rounds x {args.seconds} s per phase; load average {load[0]:.1f} at the start, "
                       f"{max(load):.1f} at most; bare and served top-{k} similarities differ by at most "
                       f"{checked['max_abs_similarity_gap']:.2g} on {checked['queries']} queries",
              "check": checked, "load": load, "rows": rows, "headline": headline(rows, args.target),
              "settings": {key: str(value) for key, value in vars(args).items()}}
    report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


def floor(rows: list[dict], concurrency: int) -> float:
    """The images/s of the faster bare loop at ``concurrency`` (medians over rounds)."""
    return max(r["summary"]["images_s"] for r in rows if r["concurrency"] == concurrency
               and r["variant"].startswith("bare"))


if __name__ == "__main__":
    main()
