"""Cost of per-sample augmentation seeding: no seeding vs the former scheme vs the current one, all or declared sources.

Loads batches of the quickstart's shapes (glyph dataset, 32 px, ``augment = "light"``, batch 64) in the main
process, as ``data.workers = 0`` does, three ways, alternating in every round so a slow phase of the machine
hits all of them:

- ``unseeded``: the plain dataset (no reproducibility across workers or resumes; the floor);
- ``former``: the scheme dmlplug used before (kept here for the comparison only): a numpy ``SeedSequence``
  per sample, and per image saving, seeding (``torch.manual_seed``, which also seeds CUDA) and restoring
  python's, numpy's and torch's global generators;
- ``current``: :func:`dmlplug.engine.seeding.sample_seeds` (splitmix64, one batch at a time) and
  :class:`dmlplug.engine.seeding.SeededDataset` (torch's CPU generator, python and numpy seeded per sample,
  states saved and restored once per batch): what a policy that declares no ``random_sources`` gets;
- ``declared``: the same with only torch's generator seeded, what the built-in policies get (they declare
  ``random_sources = {"torch"}``: torchvision's v2 transforms draw from nothing else).

Each variant includes computing the seeds, loading, transforming and collating the batch. Prints the median
CPU time (of the loading thread, so the numbers hold on a busy machine) per batch and per image, the seeding
overhead over ``unseeded`` and its ratio.

Example::

    python benchmarks/seeding_cost.py            # 30 rounds x 8 batches
    python benchmarks/seeding_cost.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import numpy as np


def former_sample_seed(seed: int, epoch: int, position: int) -> int:
    """The former per-sample seed: a numpy SeedSequence of the three integers."""
    sequence = np.random.SeedSequence([int(seed), int(epoch), int(position)])
    return int(sequence.generate_state(2, dtype=np.uint32).astype(np.uint64) @ np.array([1 << 31, 1],
                                                                                       dtype=np.uint64))


def former_load(dataset, index: int, seed: int):
    """The former per-image seeding: save, seed and restore all three global generators around one item."""
    import torch

    saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)
        return dataset[index]
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.set_rng_state(saved[2])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--batches", type=int, default=8, help="batches per variant and round")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="3 rounds of 2 batches (smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.batches = 3, 2

    import torch
    from torch.utils.data import default_collate

    import dmlplug
    from dmlplug.data.transforms import build_transform
    from dmlplug.engine.data import TransformedSource
    from dmlplug.engine.seeding import SeededDataset, SeededIndex, sample_seeds

    torch.set_num_threads(1)  # as in a DataLoader worker
    bundle = dmlplug.create("dataset", "glyphs", num_classes=300, images_per_class=32)
    dataset = TransformedSource(bundle.train, build_transform("train", augment="light", image_size=32))
    seeded = SeededDataset(dataset)
    declared = SeededDataset(dataset, frozenset({"torch"}))
    order = np.random.default_rng(0).permutation(len(dataset))
    size = args.batch_size

    def batch_indices(b: int) -> list[int]:
        return [int(i) for i in order[(b * size) % (len(order) - size):][:size]]

    def unseeded(b: int):
        return default_collate([dataset[i] for i in batch_indices(b)])

    def former(b: int):
        return default_collate([former_load(dataset, i, former_sample_seed(0, 1, b * size + slot))
                                for slot, i in enumerate(batch_indices(b))])

    def seeded_batch(b: int) -> list[SeededIndex]:
        return [SeededIndex(i, seed) for i, seed in zip(batch_indices(b), sample_seeds(0, 1, b * size, size),
                                                        strict=True)]

    def current(b: int):
        return default_collate(seeded.__getitems__(seeded_batch(b)))

    def declared_torch(b: int):
        return default_collate(declared.__getitems__(seeded_batch(b)))

    variants = {"unseeded": unseeded, "former": former, "current": current, "declared": declared_torch}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():  # warm-up
        fn(0)
    for r in range(args.rounds):
        names = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in names:
            for b in range(args.batches):
                # CPU time of this thread: the cost, robust to other processes competing for the cores
                start = time.thread_time()
                variants[name](r * args.batches + b)
                times[name].append(time.thread_time() - start)
    med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    print(f"glyphs train split, 32 px, augment light, batch {size}, main process, 1 torch thread; "
          f"{args.rounds} rounds x {args.batches} batches, median thread CPU time")
    print(f"{'variant':>9}  {'ms/batch':>9}  {'ms/image':>9}  {'seeding ms/batch':>16}  {'seeding us/image':>16}")
    for name, ms in med.items():
        extra = ms - med["unseeded"]
        print(f"{name:>9}  {ms:>9.2f}  {ms / size:>9.4f}  {extra:>16.2f}  {extra / size * 1e3:>16.1f}")
    former_extra, current_extra = med["former"] - med["unseeded"], med["current"] - med["unseeded"]
    print(f"batch time current/former: {med['current'] / med['former']:.3f}; "
          f"seeding overhead former/current: {former_extra / max(current_extra, 1e-9):.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
