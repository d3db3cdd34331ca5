"""Fréchet distance speed: dmlplug's eigenvalue route vs the scipy ``sqrtm`` reference formula at 2048-d.

Two cases, both timed in the same process on the same inputs:

* full rank: two sets of 5000 random 2048-d vectors with different (anisotropic) covariances; the
  covariances are computed once and both methods start from them (the covariance product is common to
  both and not what is compared);
* class means: 98 vs 98 points in 2048-d (the ooDML setting, rank-deficient covariances); both methods
  start from the raw points.

Run:  python benchmarks/frechet_speed.py [--dim 2048] [--points 5000] [--repeats 1]
      [--case full|means|both] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import linalg

from dmlplug_builtins.oodml.frechet import frechet_distance, frechet_distance_from_moments

EPS = 1e-8


def sqrtm_formula_from_moments(mean_a, cov_a, mean_b, cov_b, eps=EPS):
    """The reference formula: ``scipy.linalg.sqrtm`` of the regularised covariance product."""
    offset = eps * np.eye(len(cov_a))
    root = linalg.sqrtm((cov_a + offset) @ (cov_b + offset)).real
    diff = mean_a - mean_b
    return float(diff @ diff + np.trace(cov_a) + np.trace(cov_b) - 2.0 * np.trace(root))


def sqrtm_formula(features_a, features_b, eps=EPS):
    return sqrtm_formula_from_moments(features_a.mean(0), np.cov(features_a, rowvar=False),
                                      features_b.mean(0), np.cov(features_b, rowvar=False), eps)


def best_time(fn, repeats):
    best, value = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def report(name, fast, reference):
    (t_fast, v_fast), (t_ref, v_ref) = fast, reference
    print(f"{name}")
    print(f"  dmlplug      {t_fast:9.3f} s   FID = {v_fast:.10f}")
    print(f"  scipy sqrtm  {t_ref:9.3f} s   FID = {v_ref:.10f}")
    print(f"  speed-up {t_ref / t_fast:8.1f}x   relative difference {abs(v_fast - v_ref) / abs(v_ref):.2e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--points", type=int, default=5000)
    parser.add_argument("--classes", type=int, default=98)
    parser.add_argument("--repeats", type=int, default=1, help="best of N runs, for both methods")
    parser.add_argument("--case", choices=["full", "means", "both"], default="both")
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS threads for both methods (default: the library's own setting); on a busy "
                        "machine spinning BLAS threads can dominate the timings")
    args = parser.parse_args()
    if args.threads is not None:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(args.threads, user_api="blas"):
            run(args)
    else:
        run(args)


def run(args):
    rng = np.random.default_rng(0)
    dim = args.dim

    # Warm-up on a small input: the first LAPACK calls of a process pay one-off start-up costs.
    small_a, small_b = rng.standard_normal((40, 64)), rng.standard_normal((30, 64))
    frechet_distance(small_a, small_b)
    frechet_distance(np.tile(small_a, (4, 1)), np.tile(small_b, (4, 1)))
    sqrtm_formula(small_a, small_b)

    # Each case has its own generator, so its data do not depend on which cases run.
    if args.case in ("full", "both"):
        full_rank_case(np.random.default_rng(1), dim, args)
    if args.case in ("means", "both"):
        class_mean_case(np.random.default_rng(2), dim, args)


def full_rank_case(rng, dim, args):
    # Anisotropic, correlated features so that the two covariances do not commute.
    mix_a = rng.standard_normal((dim, dim)) / np.sqrt(dim)
    mix_b = rng.standard_normal((dim, dim)) / np.sqrt(dim)
    feats_a = rng.standard_normal((args.points, dim)) @ mix_a
    feats_b = rng.standard_normal((args.points, dim)) @ mix_b + 0.05
    moments = (feats_a.mean(0), np.cov(feats_a, rowvar=False), feats_b.mean(0), np.cov(feats_b, rowvar=False))
    print(f"dim {dim}, full rank: {args.points} vs {args.points} points, covariances precomputed")
    report("full-rank covariances (from moments)",
           best_time(lambda: frechet_distance_from_moments(*moments, eps=EPS), args.repeats),
           best_time(lambda: sqrtm_formula_from_moments(*moments), args.repeats))
    print()


def class_mean_case(rng, dim, args):
    means_a = np.abs(rng.standard_normal((args.classes, dim))) * 0.5
    means_b = np.abs(rng.standard_normal((args.classes, dim))) * 0.5 + 0.02
    print(f"dim {dim}, class means: {args.classes} vs {args.classes} points (rank-deficient)")
    report("class-mean case (from points)",
           best_time(lambda: frechet_distance(means_a, means_b, eps=EPS), args.repeats),
           best_time(lambda: sqrtm_formula(means_a, means_b), args.repeats))


if __name__ == "__main__":
    main()
