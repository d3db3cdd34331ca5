"""How reliably the method recipes' end-to-end tests learn: their protocol over several seeds, and broken controls.

Usage: ``python benchmarks/recipe_learning.py [--seeds 0 1 2] [--methods glyphs_diva ...] [--jobs 2] [--quick]``.
Runs each glyph method recipe with the learning protocol of its end-to-end test (``LEARNING_PROTOCOL`` in
tests/shared/e2e.py, plus the test's own overrides) for every seed, and once per method as a broken control
(learning rate 1e-12 for the embedding model: the schema forbids 0, and only batch-norm statistics then change).
Prints per run the untrained and final test recall@1, the gain, the margin that the test demands
(``LEARNS_BY`` standard errors, tests/shared/e2e.py:assert_learns), whether the test's check passes, and the
seconds the run took. ``--quick``: seed 0 only, no controls.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "shared"))

from e2e import LEARNING_PROTOCOL, LEARNS_BY, recall_standard_error, untrained_and_trained  # noqa: E402

# Each test's overrides on top of the shared protocol.
METHODS = {
    "glyphs_arcface_tcm": ["optimizer.lr=3e-3"],
    "glyphs_proxyanchor_nir": [],
    "glyphs_diva": ["regularizers.0.n_key_batches=64"],
    "glyphs_s2sd": [],
}
BROKEN = ["optimizer.lr=1e-12"]


def _one(method: str, seed: int, broken: bool, folder: Path) -> tuple:
    out = folder / f"{method}-{seed}-{'broken' if broken else 'ok'}"
    overrides = [*LEARNING_PROTOCOL, *METHODS[method], f"run.seed={seed}", *(BROKEN if broken else [])]
    args = [a for s in overrides for a in ("--set", s)]
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dmlplug", "run", str(ROOT / "recipes" / f"{method}.toml"),
                           "--out", str(out), "--quiet", *args], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        return method, seed, broken, None, None, None, seconds, proc.stderr.strip().splitlines()[-1:]
    before, after, queries = untrained_and_trained(out)
    margin = LEARNS_BY * math.sqrt(2) * recall_standard_error(queries)
    return method, seed, broken, before, after, margin, seconds, queries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--jobs", type=int, default=1, help="runs at the same time (timings then share the CPU)")
    parser.add_argument("--quick", action="store_true", help="seed 0 only, no broken controls")
    opts = parser.parse_args()
    seeds = [0] if opts.quick else opts.seeds
    plan = [(m, s, False) for m in opts.methods for s in seeds]
    if not opts.quick:
        plan += [(m, seeds[0], True) for m in opts.methods]
    print(f"{'method':24} {'seed':>4} {'variant':7} {'untrained':>9} {'final':>7} {'gain':>7} {'margin':>7} "
          f"{'test':5} {'seconds':>8}", flush=True)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(opts.jobs) as pool:
        for method, seed, broken, before, after, margin, seconds, extra in pool.map(
                lambda p: _one(*p, Path(tmp)), plan):
            variant = "broken" if broken else "recipe"
            if before is None:
                print(f"{method:24} {seed:>4} {variant:7} run failed: {extra}", flush=True)
                continue
            passes = after > before + margin
            print(f"{method:24} {seed:>4} {variant:7} {before:9.4f} {after:7.4f} {after - before:+7.4f} "
                  f"{margin:7.4f} {'pass' if passes else 'FAIL':5} {seconds:8.1f}", flush=True)


if __name__ == "__main__":
    main()
