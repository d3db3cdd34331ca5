"""Time and peak memory of threshold calibration (dmlplug.evaluation.calibration.calibrate) on synthetic data.

Usage: ``python benchmarks/calibration_speed.py [--items 6000 20000] [--dim 128] [--repeats 3] [--quick]``.
Prints, per split size, the median seconds of the exact all-pairs scan (OPIS off), pairs per second, the
projected time for 60 000 items (SOP's test split, 1.8 G pairs; the scan is quadratic in the items) and the
peak traced memory of one run. ``--quick``: 1 500 items, one repeat.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import numpy as np

from dmlplug.evaluation.calibration import calibrate


def _data(n: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    classes = max(2, n // 5)  # SOP-like: about five images per class
    y = rng.integers(0, classes, n)
    x = rng.standard_normal((n, dim)) + 2.0 * rng.standard_normal((classes, dim))[y]
    return x.astype(np.float32), y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[6000, 20000])
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.items, args.repeats = [1500], 1
    for n in args.items:
        x, y = _data(n, args.dim)
        pairs = n * (n - 1) // 2
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            calibrate(x, y, opis=False)
            times.append(time.perf_counter() - start)
        tracemalloc.start()
        calibrate(x, y, opis=False)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        median = statistics.median(times)
        print(f"items {n:>6}  pairs {pairs:>13,}  median {median:8.2f} s  ({pairs / median / 1e6:6.1f} M pairs/s)  "
              f"projected 60k items {median * (60000 / n) ** 2 / 60:6.1f} min  peak memory {peak / 2**20:7.1f} MiB")


if __name__ == "__main__":
    main()
