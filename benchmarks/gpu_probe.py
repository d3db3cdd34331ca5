"""What the steps of ``benchmarks/gpu_check.py`` run in their own processes: measured dmlplug runs and small checks.

Each subcommand writes one JSON file, the step's numbers::

    python benchmarks/gpu_probe.py runs SPEC.json OUT.json      # dmlplug.run for each entry of SPEC, measured
    python benchmarks/gpu_probe.py knn OUT.json --n 60000 --dim 512 --device cuda
    python benchmarks/gpu_probe.py faiss OUT.json
    python benchmarks/gpu_probe.py sop-data ROOT --train-classes 11318 --test-classes 11316 --per-class 5

``runs`` trains through :func:`dmlplug.run` exactly as ``dmlplug run`` does, with an in-process plugin that
records the time of each logging step (the engine reads the losses back there, so the device has caught up:
images/s between two of them is a true rate), the loss terms it read, when each evaluation ended, and the peak
GPU memory; after the run it adds ``results.json``'s metrics and a digest of ``checkpoints/last.pt``'s model
tensors, so two runs can be compared for bit-identity.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

from dmlplug import hookimpl

HERE = Path(__file__).resolve().parent


class Probe:
    """Records what a run's hooks see: logging-step times and losses, evaluation and checkpoint times."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.start = time.perf_counter()
        self.logged: list[tuple[int, float]] = []
        self.losses: dict[str, float] = {}
        self.nonfinite: list[str] = []
        self.marks: list[tuple[str, float]] = []  # ("step"/"checkpoint"/"eval:<epoch>:<split>", time)

    @hookimpl
    def on_step_end(self, run, step, losses):
        now = time.perf_counter() - self.start
        if step % run.recipe.run.log_every == 0:  # already on the host: reading them waits for nothing more
            self.logged.append((step, now))
            for name, value in losses.items():
                self.losses[name] = float(value)
                if not math.isfinite(value):
                    self.nonfinite.append(f"{name}@{step}")
        self.marks.append(("step", now))

    @hookimpl
    def on_checkpoint(self, run, path):
        self.marks.append(("checkpoint", time.perf_counter() - self.start))

    @hookimpl
    def on_eval_end(self, run, epoch, split, metrics):
        self.marks.append((f"eval:{epoch}:{split}", time.perf_counter() - self.start))

    def eval_seconds(self) -> dict[str, float]:
        """Each evaluation's duration: from the step, checkpoint or evaluation before it to its end."""
        out, previous = {}, 0.0
        for kind, at in self.marks:
            if kind.startswith("eval:"):
                out[kind[5:]] = round(at - previous, 3)
            previous = at
        return out

    def images_per_s(self, batch_size: int, skip: int) -> float | None:
        """Training images/s between the first logging step after ``skip`` steps and the last one."""
        points = [(s, t) for s, t in self.logged if s > skip] or self.logged[-2:]
        if len(points) < 2:
            return None
        (s0, t0), (s1, t1) = points[0], points[-1]
        return round(batch_size * (s1 - s0) / (t1 - t0), 1)


def model_digest(checkpoint: Path) -> str | None:
    """sha256 over the model tensors of a checkpoint (names, dtypes, shapes and bytes), or None without one."""
    import torch

    if not checkpoint.is_file():
        return None
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["model"]
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def cmd_runs(spec_path: Path, out_path: Path) -> None:
    """Run every entry of the spec (label, recipe, overrides, out, skip) in this process, measured."""
    import torch

    import dmlplug
    from dmlplug.plugins import get_host

    probe = Probe()
    get_host().pm.register(probe, "gpu-probe")
    results = {}
    for entry in json.loads(spec_path.read_text()):
        probe.reset()
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        record: dict = {"out": entry["out"]}
        try:
            result = dmlplug.run(entry["recipe"], overrides=entry.get("overrides", []), out=entry["out"], quiet=True)
            record["status"] = result.status
        except Exception as error:  # noqa: BLE001 - recorded, and the step fails on it
            record["status"], record["error"] = "failed", f"{type(error).__name__}: {error}"
        record["seconds"] = round(time.perf_counter() - started, 2)
        run_dir = Path(entry["out"])
        recipe = run_dir / "recipe.resolved.toml"
        batch = 0
        if recipe.is_file():
            import tomllib

            batch = tomllib.loads(recipe.read_text())["data"]["batch_size"]
        record["images_per_s"] = probe.images_per_s(batch, entry.get("skip", 10))
        record["losses"], record["nonfinite"] = dict(probe.losses), list(probe.nonfinite)
        record["eval_seconds"] = probe.eval_seconds()
        record["logged_steps"] = len(probe.logged)
        if torch.cuda.is_available():
            record["gpu_peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        results_file = run_dir / "results.json"
        if results_file.is_file():
            saved = json.loads(results_file.read_text())
            record["metrics"], record["steps"] = saved.get("metrics", {}), saved.get("steps")
        record["model_digest"] = model_digest(run_dir / "checkpoints" / "last.pt")
        results[entry["label"]] = record
        out_path.write_text(json.dumps(results, indent=1))  # what finished survives a timeout of the step


def cmd_knn(out_path: Path, n: int, dim: int, device: str) -> None:
    """dmlplug's kNN metrics of the same embeddings on the CPU (numpy, auto backend) and on ``device``."""
    import numpy as np
    import torch

    import dmlplug

    sys.path.insert(0, str(HERE))
    from eval_speed import make_set  # the benchmark's clustered SOP-like set: class sizes 2..8

    x, y = make_set(n, dim, 2, 8, 1.5)
    evaluators = ["retrieval", "map_at_1000", "map_at_c"]
    started = time.perf_counter()
    cpu = dmlplug.evaluate(x, y, evaluators)
    cpu_s = time.perf_counter() - started
    xt, yt = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    dmlplug.evaluate(xt, yt, evaluators)  # warm-up: CUDA context, kernels, allocator
    times = []
    for _ in range(3):
        started = time.perf_counter()
        dev = dmlplug.evaluate(xt, yt, evaluators)  # floats: the device has finished
        times.append(time.perf_counter() - started)
    diffs = {k: abs(cpu[k] - dev[k]) for k in cpu}
    result = {"n": n, "dim": dim, "device": device, "cpu_seconds": round(cpu_s, 3),
              "device_seconds_median": round(sorted(times)[1], 4), "identical": all(d == 0 for d in diffs.values()),
              "max_abs_diff": max(diffs.values()), "metrics_cpu": cpu, "metrics_device": dev,
              "dtype": str(np.asarray(x).dtype)}
    out_path.write_text(json.dumps(result, indent=1))


def cmd_faiss(out_path: Path) -> None:
    """Whether faiss is importable and is the GPU build; if so, dmlplug's faiss-gpu backend agrees with torch's."""
    try:
        import faiss
    except ImportError as error:
        out_path.write_text(json.dumps({"faiss": None, "skip": f"faiss is not importable: {error}"}))
        return
    gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    result: dict = {"faiss": faiss.__version__, "gpus": gpus}
    if not gpus:
        result["skip"] = f"faiss {faiss.__version__} is the CPU build (no GPU): faiss-gpu is not importable"
    else:
        import numpy as np
        import torch

        import dmlplug

        rng = np.random.default_rng(0)
        x = rng.standard_normal((20000, 128)).astype(np.float32)
        y = rng.integers(0, 4000, 20000)
        xt, yt = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
        started = time.perf_counter()
        gpu = dmlplug.evaluate(xt, yt, ["retrieval"], backend="faiss-gpu")
        result["faiss_gpu_seconds"] = round(time.perf_counter() - started, 3)
        ref = dmlplug.evaluate(xt, yt, ["retrieval"], backend="torch")
        result["max_abs_diff_vs_torch"] = max(abs(gpu[k] - ref[k]) for k in gpu)
    out_path.write_text(json.dumps(result, indent=1))


def _write_images(job: tuple[Path, list[tuple[str, int]], int]) -> int:
    import numpy as np
    from PIL import Image

    root, items, size = job
    written = 0
    for relpath, seed in items:
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        # A random colour plus per-image noise: cheap to write, JPEG-sized like a thumbnail.
        rng = np.random.default_rng(seed)
        base = rng.integers(0, 256, (1, 1, 3))
        image = (base + rng.integers(-40, 40, (size * 3 // 4, size, 3))).clip(0, 255).astype(np.uint8)
        Image.fromarray(image).save(path, quality=80)
        written += path.stat().st_size
    return written


def cmd_sop_data(root: Path, train_classes: int, test_classes: int, per_class: int, size: int, procs: int) -> dict:
    """A synthetic Stanford Online Products tree in the official layout (Ebay_train.txt / Ebay_test.txt)."""
    from multiprocessing import Pool

    supers = ["bicycle", "cabinet", "chair", "coffee_maker", "fan", "kettle", "lamp", "mug", "sofa", "stapler",
              "table", "toaster"]
    started = time.perf_counter()
    root.mkdir(parents=True, exist_ok=True)
    items: list[tuple[str, int]] = []
    image_id = 0
    for split, first, count in (("train", 1, train_classes), ("test", train_classes + 1, test_classes)):
        lines = ["image_id class_id super_class_id path"]
        for class_id in range(first, first + count):
            super_id = (class_id - 1) * len(supers) // (train_classes + test_classes) + 1
            product = 100000000000 + class_id
            for k in range(per_class):
                image_id += 1
                relpath = f"{supers[super_id - 1]}_final/{product}_{k}.JPG"
                lines.append(f"{image_id} {class_id} {super_id} {relpath}")
                items.append((relpath, image_id))
        (root / f"Ebay_{split}.txt").write_text("\n".join(lines) + "\n")
    chunks = [(root, items[i::procs], size) for i in range(procs)]
    with Pool(procs) as pool:
        total = sum(pool.map(_write_images, chunks))
    return {"images": len(items), "train_classes": train_classes, "test_classes": test_classes,
            "mib": round(total / 2**20, 1), "seconds": round(time.perf_counter() - started, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    runs = sub.add_parser("runs")
    runs.add_argument("spec", type=Path)
    runs.add_argument("out", type=Path)
    knn = sub.add_parser("knn")
    knn.add_argument("out", type=Path)
    knn.add_argument("--n", type=int, default=60000)
    knn.add_argument("--dim", type=int, default=512)
    knn.add_argument("--device", default="cuda")
    faiss = sub.add_parser("faiss")
    faiss.add_argument("out", type=Path)
    sop = sub.add_parser("sop-data")
    sop.add_argument("root", type=Path)
    sop.add_argument("--train-classes", type=int, default=11318)
    sop.add_argument("--test-classes", type=int, default=11316)
    sop.add_argument("--per-class", type=int, default=5)
    sop.add_argument("--size", type=int, default=96, help="image width in pixels (height: 3/4 of it)")
    sop.add_argument("--procs", type=int, default=os.cpu_count() or 1)
    sop.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "runs":
        cmd_runs(args.spec, args.out)
    elif args.command == "knn":
        cmd_knn(args.out, args.n, args.dim, args.device)
    elif args.command == "faiss":
        cmd_faiss(args.out)
    else:
        found = cmd_sop_data(args.root, args.train_classes, args.test_classes, args.per_class, args.size, args.procs)
        args.json.write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
