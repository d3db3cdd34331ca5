"""Cost of the retrieval pictures drawn at every evaluation (dmlplug.engine.pictures).

Usage: ``python benchmarks/pictures_speed.py [--rows 16] [--k 5] [--items 20000] [--repeats 7] [--quick]``.

Prints median wall and CPU seconds (CPU: less sensitive to a loaded machine) of, alternating in one loop so
machine load hits them alike:

* ``pillow``: :func:`dmlplug.evaluation.picture_grid.render_grid`, a ``rows``×(1 + k) grid of 64 px
  thumbnails from decoded 500×375 photographs (CUB-sized), PNG encoding included;
* ``matplotlib``: the same grid as a matplotlib figure of ``rows``×(1 + k) image axes with coloured frames
  and captions, saved as PNG (what the module chose not to use), and the ratio matplotlib / pillow;
* ``write_pictures``: both grids of an evaluation end to end (neighbour search of the chosen queries, image
  loading from memory, drawing, PNG files) on ``items`` random 128-d embeddings, with the per-query AP
  already computed, as the default ``map_at_r`` evaluator leaves it in the context during a run (without
  that evaluator the pictures compute MAP@R themselves: one relevance search, the cost of that evaluator).

``--quick``: 4 rows, 2 000 items, 2 repeats.
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def _photos(count: int) -> list:
    from PIL import Image

    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 255, (375, 500, 3), dtype=np.uint8)) for _ in range(count)]


def _pillow(photos, rows: int, k: int) -> None:
    from dmlplug.evaluation.picture_grid import CORRECT, QUERY, WRONG, Cell, render_grid

    cells = [[Cell(photos[(r * (k + 1) + c) % len(photos)], ("class", "0.912"),
                   QUERY if c == 0 else (CORRECT if c % 2 else WRONG)) for c in range(k + 1)] for r in range(rows)]
    render_grid(cells, title="benchmark\nlegend", thumb=64).save(io.BytesIO(), format="PNG")


def _matplotlib(photos, rows: int, k: int) -> None:
    from matplotlib.figure import Figure

    columns = k + 1
    fig = Figure(figsize=(columns * 0.9, rows * 1.1), dpi=80)
    axes = fig.subplots(rows, columns, squeeze=False)
    for r in range(rows):
        for c in range(columns):
            ax = axes[r][c]
            ax.imshow(photos[(r * columns + c) % len(photos)])
            ax.set_xticks([])
            ax.set_yticks([])
            for spine in ax.spines.values():
                spine.set_edgecolor("blue" if c == 0 else ("green" if c % 2 else "red"))
                spine.set_linewidth(3)
            ax.set_xlabel("0.912", fontsize=6)
    fig.savefig(io.BytesIO(), format="png")


def _evaluation(items: int):
    from dmlplug.data import ArraySource
    from dmlplug.evaluation import EvalContext

    rng = np.random.default_rng(0)
    labels = rng.integers(0, items // 5, items)
    x = rng.standard_normal((items, 128)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    images = rng.integers(0, 255, (64, 120, 160, 3), dtype=np.uint8)
    source = ArraySource(images[np.arange(items) % 64], labels, [str(c) for c in range(items // 5)])
    return EvalContext(x, labels, backend="torch"), source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--items", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.items, args.repeats = 4, 2000, 2
    from dmlplug.engine.pictures import write_pictures
    from dmlplug.evaluation.pictures import query_average_precision

    photos = _photos(args.rows * (args.k + 1))
    times: dict[str, list[float]] = {"pillow": [], "matplotlib": [], "write_pictures": []}
    cpu: dict[str, list[float]] = {name: [] for name in times}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.repeats):
            for name, work in (("pillow", lambda: _pillow(photos, args.rows, args.k)),
                               ("matplotlib", lambda: _matplotlib(photos, args.rows, args.k))):
                start, start_cpu = time.perf_counter(), time.process_time()
                work()
                times[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
            ctx, source = _evaluation(args.items)
            query_average_precision(ctx)  # what the map_at_r evaluator caches before the pictures are drawn
            start, start_cpu = time.perf_counter(), time.process_time()
            write_pictures(ctx, source, Path(folder), epoch=1, split="test", queries=args.rows, k=args.k, seed=0)
            times["write_pictures"].append(time.perf_counter() - start)
            cpu["write_pictures"].append(time.process_time() - start_cpu)
    med = {name: statistics.median(values) for name, values in times.items()}
    med_cpu = {name: statistics.median(values) for name, values in cpu.items()}
    notes = {"pillow": f"{args.rows}x{args.k + 1} grid of 64 px thumbnails from 500x375 photos",
             "matplotlib": f"ratio matplotlib/pillow: wall {med['matplotlib'] / med['pillow']:.1f}, "
                           f"CPU {med_cpu['matplotlib'] / med_cpu['pillow']:.1f}",
             "write_pictures": f"both grids, {args.items} items, 128-d, AP cached"}
    for name in times:
        print(f"{name:<15} wall {med[name]:7.3f} s  CPU {med_cpu[name]:7.3f} s  ({notes[name]})")


if __name__ == "__main__":
    main()
