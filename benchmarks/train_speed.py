"""Training step time of dmlplug against a bare PyTorch + PML loop doing the same work.

Both sides train the same model (timm backbone without classifier, average pooling, a linear layer,
L2-normalised), on batches of the same size from PML's ``MPerClassSampler`` (same ``m``), with the
Multi-Similarity loss and miner and Adam, over the same glyph images and torchvision transform, loaded
by a DataLoader with the same number of workers. dmlplug trains through :func:`dmlplug.run` on
``recipes/quickstart.toml`` with overrides (exactly what a user runs); an in-process plugin records the
wall-clock time of every ``on_step_end``, so a step's time includes loading its batch, as a user sees it.
The bare loop is timed the same way (one timestamp per optimizer step). The two alternate, ``--rounds``
times each, in one process, so load on the machine affects both alike. Reported: the median step after
``--warmup`` steps of every round, and the mean step over that window (on a GPU, where neither side waits
for the device every step, a step's timestamp is when it was queued: the window mean is the figure to read).

The machine's speed drifts by more than the difference being measured (the same bare loop took 240 to
280 ms per step in different minutes), so the headline ratio pairs each dmlplug round with the bare round
next to it: ``pair ratio = median step of the dmlplug round / median step of the adjacent bare round``, and
the reported ratio is the median over pairs, with the range of the pair ratios beside it. Many short
rounds beat few long ones for this.

Examples::

    python benchmarks/train_speed.py                    # CPU preset: quickstart shapes, workers 0 and 2
    python benchmarks/train_speed.py --quick            # smoke run: fewer steps and rounds
    python benchmarks/train_speed.py --preset gpu       # ResNet-50, 224 px, batch 112, bf16, channels_last
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from dmlplug import hookimpl

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "quickstart.toml"


@dataclass
class Preset:
    """The shapes both sides train with."""

    model: str
    image_size: int
    batch_size: int
    m: int
    embedding_size: int
    workers: list[int]
    device: str
    bf16: bool
    channels_last: bool
    augment: str
    num_classes: int
    images_per_class: int


PRESETS = {
    # the quickstart recipe's shapes
    "cpu": Preset("resnet10t", 32, 64, 4, 64, [0, 2], "cpu", False, False, "light", 300, 32),
    # a typical GPU DML setting (ResNet-50, 224 px, batch 112 = 28 classes x 4)
    "gpu": Preset("resnet50", 224, 112, 4, 512, [8], "cuda", True, True, "dml", 300, 32),
}


def dmlplug_overrides(p: Preset, workers: int, steps: int) -> list[str]:
    """The quickstart recipe turned into ``p``'s shapes: one epoch of ``steps`` batches, no initial evaluation."""
    return [
        f"backbone.model={p.model}", f"data.image_size={p.image_size}", f"data.batch_size={p.batch_size}",
        f"data.sampler.m={p.m}", f"head.embedding_size={p.embedding_size}", f"data.workers={workers}",
        f"data.augment={p.augment}", f"data.dataset.num_classes={p.num_classes}",
        f"data.dataset.images_per_class={p.images_per_class}", f"data.sampler.batches_per_epoch={steps}",
        "run.epochs=1", "evaluation.initial=false", f"run.device={p.device}",
        f"run.precision={'bf16' if p.bf16 else 'fp32'}", f"run.channels_last={str(p.channels_last).lower()}",
    ]


class StepClock:
    """A throwaway plugin: the time of every ``on_step_end`` of the run in progress."""

    def __init__(self):
        self.times: list[float] = []

    @hookimpl
    def on_step_end(self, run, step, losses):
        self.times.append(time.perf_counter())


def run_dmlplug(p: Preset, workers: int, steps: int, out: Path) -> list[float]:
    """Step times (s) of one dmlplug run of ``steps`` steps (the first has no predecessor: dropped)."""
    import dmlplug
    from dmlplug.plugins import get_host

    clock = StepClock()
    host = get_host()
    host.pm.register(clock, "train-speed-clock")
    try:
        dmlplug.run(RECIPE, overrides=dmlplug_overrides(p, workers, steps), out=out, quiet=True)
    finally:
        host.pm.unregister(clock)
    return [b - a for a, b in zip(clock.times, clock.times[1:], strict=False)]


def run_bare(p: Preset, workers: int, steps: int, source) -> list[float]:
    """Step times (s) of a hand-written PyTorch + PML loop over ``steps`` batches."""
    import timm
    import torch
    import torch.nn.functional as F
    from pytorch_metric_learning import losses, miners, samplers
    from torch.utils.data import DataLoader, Dataset

    from dmlplug.data.transforms import build_transform

    torch.manual_seed(0)
    transform = build_transform("train", augment=p.augment, image_size=p.image_size)

    class Images(Dataset):
        def __len__(self):
            return len(source)

        def __getitem__(self, i):
            return transform(source.load_image(i)), int(source.labels[i])

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = timm.create_model(p.model, pretrained=False, num_classes=0, global_pool="avg")
            self.fc = torch.nn.Linear(self.body.num_features, p.embedding_size)

        def forward(self, x):
            return F.normalize(self.fc(self.body(x)), dim=-1)

    device = p.device
    model = Net().to(device)
    if p.channels_last:
        model = model.to(memory_format=torch.channels_last)
    sampler = samplers.MPerClassSampler(source.labels, m=p.m, batch_size=p.batch_size,
                                        length_before_new_iter=steps * p.batch_size)
    loader = DataLoader(Images(), batch_size=p.batch_size, sampler=sampler, num_workers=workers,
                        pin_memory=device == "cuda", persistent_workers=workers > 0, drop_last=True)
    loss_fn, miner = losses.MultiSimilarityLoss(), miners.MultiSimilarityMiner()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
    model.train()
    times = []
    for images, labels in loader:
        images = images.to(device, non_blocking=True)
        if p.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        labels = labels.to(device, non_blocking=True)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=p.bf16):
            emb = model(images)
        emb = emb.float()
        loss = loss_fn(emb, labels, miner(emb, labels))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter())  # no device sync: on a GPU the window mean is the honest figure
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--workers", default=None, help="comma-separated worker counts (default: the preset's)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps per round (default 30, quick 12)")
    parser.add_argument("--warmup", type=int, default=None, help="steps of each round not counted (default 5)")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds per side (default 8, quick 1)")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    args = parser.parse_args(argv)
    p = PRESETS[args.preset]
    steps = args.steps or (12 if args.quick else 30)
    warmup = args.warmup if args.warmup is not None else (3 if args.quick else 5)
    rounds = args.rounds or (1 if args.quick else 8)
    workers = [int(w) for w in args.workers.split(",")] if args.workers else p.workers
    if warmup >= steps - 1:
        parser.error("--warmup must leave at least two timed steps")

    import torch

    if p.device == "cuda" and not torch.cuda.is_available():
        print(f"train_speed: the {args.preset!r} preset needs CUDA, and torch.cuda.is_available() is False "
              "on this machine; run it on a GPU machine, or use --preset cpu", file=sys.stderr)
        return 2
    import dmlplug

    bundle = dmlplug.create("dataset", "glyphs", num_classes=p.num_classes, images_per_class=p.images_per_class)
    print(f"preset {args.preset}: {p.model}, {p.image_size} px, batch {p.batch_size} (m={p.m}), "
          f"{'bf16' if p.bf16 else 'fp32'}{', channels_last' if p.channels_last else ''}, device {p.device}, "
          f"{steps} steps x {rounds} rounds per side, first {warmup} of each round not counted")
    with tempfile.TemporaryDirectory() as tmp:
        for w in workers:
            timed: dict[str, list[float]] = {"dmlplug": [], "bare": []}
            pair_ratios = []
            for r in range(rounds):
                # alternate which side goes first, so a slow phase of the machine hits both
                order = ("dmlplug", "bare") if r % 2 == 0 else ("bare", "dmlplug")
                round_median = {}
                for side in order:
                    if side == "dmlplug":
                        t = run_dmlplug(p, w, steps, Path(tmp) / f"w{w}r{r}")
                    else:
                        t = run_bare(p, w, steps, bundle.train)
                    t = t[warmup - 1:]  # t[0] is the time between steps 1 and 2
                    timed[side] += t
                    round_median[side] = statistics.median(t)
                pair_ratios.append(round_median["dmlplug"] / round_median["bare"])
                print(f"workers={w} round {r + 1}/{rounds}: bare {round_median['bare'] * 1e3:.1f} ms, "
                      f"dmlplug {round_median['dmlplug'] * 1e3:.1f} ms, ratio {pair_ratios[-1]:.3f}", flush=True)
            med = {side: statistics.median(t) for side, t in timed.items()}
            mean = {side: statistics.fmean(t) for side, t in timed.items()}
            for side in ("bare", "dmlplug"):
                print(f"workers={w} {side:8s} median step {med[side] * 1e3:8.1f} ms  "
                      f"{p.batch_size / med[side]:8.0f} images/s  (mean {mean[side] * 1e3:.1f} ms, "
                      f"{len(timed[side])} steps)")
            print(f"workers={w} ratio dmlplug / bare = {statistics.median(pair_ratios):.3f} (median of "
                  f"{rounds} paired rounds, range {min(pair_ratios):.3f}-{max(pair_ratios):.3f}); pooled: "
                  f"{med['dmlplug'] / med['bare']:.3f} (median), {mean['dmlplug'] / mean['bare']:.3f} (mean)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
