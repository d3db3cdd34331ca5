"""Sharded embedding: images/s of ``dmlplug embed`` in one process and under ``torchrun`` with 2 ranks.

Both commands embed the same image folder with the same ONNX bundle; they run alternately (``--repeats``
rounds, medians), each as the command a user types, so the wall time includes starting Python, importing torch
and loading the bundle (the same in every rank). The 1-process run uses ONNX Runtime's default threads; each
torchrun rank runs with ``OMP_NUM_THREADS=1`` (torchrun's default).

Without ``--bundle``/``--images`` the benchmark makes its own: the quickstart recipe (glyphs, ResNet-10t,
32×32 images, 64-d) trained for a few batches, exported to ONNX, and ``--count`` PNG copies of its test images.

Usage::

    python benchmarks/embed_shards.py                       # 2048 images, 3 rounds
    python benchmarks/embed_shards.py --count 8192 --repeats 5
    python benchmarks/embed_shards.py --bundle BUNDLE --images DIR
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_bundle(folder: Path, count: int) -> tuple[Path, Path]:
    """A briefly trained quickstart run exported to ONNX, and ``count`` PNG images of its test split."""
    import dmlplug

    sets = ["run.epochs=1", "data.sampler.batches_per_epoch=2", "evaluation.initial=false"]
    run = dmlplug.run(ROOT / "recipes" / "quickstart.toml", overrides=sets, out=folder / "run", quiet=True)
    bundle = folder / "bundle"
    dmlplug.export(run.directory, bundle, images=16, calibrate=False)
    loaded = dmlplug.load_run(run.directory)
    images = folder / "images"
    test = loaded.dataset.test
    for i in range(count):
        sub = images / f"{i // 1000:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        test.load_image(i % len(test)).save(sub / f"{i:06d}.png")
    return bundle, images


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    elapsed = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path)
    parser.add_argument("--images", type=Path)
    parser.add_argument("--count", type=int, default=2048, help="images made when --images is not given")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.bundle is None or args.images is None:
            args.bundle, args.images = make_bundle(work, args.count)
        from dmlplug.bundle.images import list_images

        n = len(list_images(args.images))
        common = ["embed", str(args.bundle), str(args.images), "--batch-size", str(args.batch_size), "--quiet"]
        times: dict[str, list[float]] = {"1 process": [], "torchrun 2 ranks": []}
        for round_ in range(args.repeats):
            out1, out2 = work / f"one{round_}.npz", work / f"two{round_}"
            times["1 process"].append(timed([sys.executable, "-m", "dmlplug", *common, "--out", str(out1)],
                                            dict(os.environ)))
            times["torchrun 2 ranks"].append(timed(
                [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr", "127.0.0.1",
                 "--master-port", str(_port()), "-m", "dmlplug", *common, "--out", str(out2)],
                {**os.environ, "OMP_NUM_THREADS": "1"}))
            out1.unlink()
            shutil.rmtree(out2)
        print(f"{n} images, batch size {args.batch_size}, {os.cpu_count()} CPU cores, medians of {args.repeats} "
              "alternating rounds (wall time of the whole command, start-up included)")
        base = statistics.median(times["1 process"])
        for name, values in times.items():
            median = statistics.median(values)
            print(f"  {name:18s} {median:7.2f} s  {n / median:8.1f} images/s  ({base / median:.2f}x the 1-process "
                  "speed)")


if __name__ == "__main__":
    main()
