"""Re-ranking in evaluation: recall@1 and MAP@R with and without αQE, DBA and k-reciprocal, and their cost.

Two sets:

- ``glyphs``: the test split of the embedded glyph dataset, embedded by a short quickstart run (``--run RUN_DIR``
  uses a trained run; without it the quickstart recipe is trained for ``--epochs`` epochs into a temporary
  folder first, which takes minutes on a 2-core CPU);
- ``cub``: a CUB-size synthetic clustered set (6,000 × 512, classes of 25–35, the ``cub`` set of
  benchmarks/eval_speed.py), leave-one-out.

For each set the plain exact evaluation (``EvalContext`` + the ``retrieval`` evaluator: exact kNN search and
metrics) and each re-ranked evaluation (:func:`dmlplug.evaluation.rerank_eval.rerank_metrics`, the same
evaluator over the re-ranked neighbour list) run alternately ``--repeats`` times; the printed time is the median,
per query in µs, and as a ratio to the plain exact evaluation of the same round.

Usage::

    python benchmarks/rerank_quality.py                      # both sets, a fresh 2-epoch quickstart run
    python benchmarks/rerank_quality.py --run runs/quickstart/2026-...   # glyphs from a trained run
    python benchmarks/rerank_quality.py --sets cub --repeats 1
    python benchmarks/rerank_quality.py --quick              # smoke run: a 1,500-item CUB-like set, one round
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_speed import SETS, make_set  # noqa: E402  (the benchmarks folder is not a package)

#: Methods compared, with the defaults of docs/reranking.md.
RERANK_METHODS = ["aqe", "dba", "krnn"]


def rerank_spec(name: str) -> Any:
    """The validated spec of the built-in re-ranker ``name`` (the installed plugins' registry)."""
    from dmlplug.evaluation.rerank_spec import parse_rerank
    from dmlplug.plugins import get_host

    return parse_rerank(name, registry=get_host().registry)


def glyph_embeddings(run: str | None, epochs: int) -> tuple[np.ndarray, np.ndarray, str]:
    """The glyph test split's embeddings and labels, from ``run`` or a fresh short quickstart run."""
    import dmlplug
    from dmlplug.engine.data import TransformedSource
    from dmlplug.engine.distributed import embed_dataset

    source = run
    if source is None:
        folder = Path(tempfile.mkdtemp(prefix="rerank_quality_"))
        recipe = Path(__file__).resolve().parents[1] / "recipes" / "quickstart.toml"
        print(f"training the quickstart recipe for {epochs} epochs into {folder} ...", flush=True)
        result = dmlplug.run(recipe, overrides=[f"run.epochs={epochs}", "loggers=[]"], out=folder / "run",
                             quiet=True)
        assert result.status == "completed", result.status
        source = str(folder / "run")
    loaded = dmlplug.load_run(source)
    embeddings, labels = embed_dataset(loaded.model, TransformedSource(loaded.dataset.test, loaded.test_transform),
                                       batch_size=256, workers=0, device="cpu")
    return embeddings.numpy(), labels, source


def measure(x: np.ndarray, y: np.ndarray, repeats: int) -> dict[str, dict[str, float]]:
    """Metrics and median seconds of the plain evaluation and of each re-ranked one (alternating rounds)."""
    import dmlplug
    from dmlplug.evaluation import EvalContext, run_evaluators
    from dmlplug.evaluation.api import build_evaluators
    from dmlplug.evaluation.rerank_eval import rerank_metrics

    specs = {name: rerank_spec(name) for name in RERANK_METHODS}
    evaluators = build_evaluators(["retrieval"], dmlplug.plugin_host())
    times: dict[str, list[float]] = {name: [] for name in ["exact", *RERANK_METHODS]}
    ratios: dict[str, list[float]] = {name: [] for name in RERANK_METHODS}
    values: dict[str, dict[str, float]] = {}
    for _ in range(repeats):
        start = time.perf_counter()
        context = EvalContext(x, y)
        plain = run_evaluators(evaluators, context)
        exact = time.perf_counter() - start
        times["exact"].append(exact)
        values["exact"] = {"recall@1": plain["recall@1"], "map@r": plain["map@r"]}
        for name in RERANK_METHODS:
            start = time.perf_counter()
            got = rerank_metrics(evaluators, context, [specs[name]])
            spent = time.perf_counter() - start
            times[name].append(spent)
            ratios[name].append(spent / exact)
            values[name] = {"recall@1": got[f"recall@1+{name}"], "map@r": got[f"map@r+{name}"]}
    out = {}
    for name in times:
        out[name] = {**values[name], "seconds": statistics.median(times[name]),
                     "ratio": statistics.median(ratios[name]) if name in ratios else 1.0}
    return out


def report(title: str, x: np.ndarray, results: dict[str, dict[str, float]]) -> None:
    n = len(x)
    print(f"\n## {title}: {n} items x {x.shape[1]} dims, leave-one-out")
    print("| method | recall@1 | MAP@R | time (s) | µs / query | × exact evaluation |")
    print("|---|---|---|---|---|---|")
    base = results["exact"]
    for name, r in results.items():
        label = "exact (no re-ranking)" if name == "exact" else rerank_spec(name).describe()
        delta = "" if name == "exact" else \
            f" ({r['recall@1'] - base['recall@1']:+.4f})"
        delta_m = "" if name == "exact" else f" ({r['map@r'] - base['map@r']:+.4f})"
        print(f"| {label} | {r['recall@1']:.4f}{delta} | {r['map@r']:.4f}{delta_m} | {r['seconds']:.2f} | "
              f"{r['seconds'] / n * 1e6:.0f} | {r['ratio']:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="+", default=["glyphs", "cub"], choices=["glyphs", "cub"])
    parser.add_argument("--run", help="A trained quickstart run directory for the glyph set.")
    parser.add_argument("--epochs", type=int, default=2, help="Epochs of the fresh quickstart run (no --run).")
    parser.add_argument("--repeats", type=int, default=3, help="Alternating rounds; medians are printed.")
    parser.add_argument("--quick", action="store_true", help="Smoke run: 1,500 items of the cub set, one round.")
    args = parser.parse_args()
    if args.quick:
        n, dim, lo, hi, _, noise = SETS["cub"]
        x, y = make_set(1500, dim, lo, hi, noise)
        report("CUB-like synthetic set (quick)", x, measure(x, y, 1))
        return
    if "glyphs" in args.sets:
        x, y, source = glyph_embeddings(args.run, args.epochs)
        report(f"glyph test split (embeddings of {source})", x, measure(x, y, args.repeats))
    if "cub" in args.sets:
        n, dim, lo, hi, _, noise = SETS["cub"]
        x, y = make_set(n, dim, lo, hi, noise)
        report("CUB-size synthetic set", x, measure(x, y, args.repeats))


if __name__ == "__main__":
    main()
