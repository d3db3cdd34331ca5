"""Training step time of dmlplug against a bare PyTorch + PML loop doing the same work.

Both sides train the same model (timm backbone without classifier, average pooling, a linear layer,
L2-normalised), on batches of the same size from PML's ``MPerClassSampler`` (same ``m``), with the
Multi-Similarity loss and miner and Adam, over the same glyph images and torchvision transform, loaded
by a DataLoader with the same number of workers. dmlplug trains through :func:`dmlplug.run` on
``recipes/quickstart.toml`` with overrides (exactly what a user runs, loggers included); an in-process
plugin's ``on_step_end`` marks its steps, so a step's time includes loading its batch, as a user sees it.

Two ways to alternate the sides (``--mode``):

* ``interleaved`` (the CPU default): the bare loop runs *inside* the dmlplug run, one bare step in every
  ``on_step_end`` hook. Every dmlplug step (from the end of one hook to the start of the next: loading,
  the engine's step, the other hooks) is paired with the bare step (loading and training) just after it.
  On the 2-core CI machine the speed of the machine drifts by ±10% within seconds, more than the 3% being
  judged; step-level pairing cancels the drift, where whole alternating runs could not (8 paired rounds gave
  pair ratios from 0.90 to 1.18). With loader workers, each side's workers prefetch while the other side
  trains, as they would while their own side trains.
* ``rounds`` (the GPU default): whole dmlplug runs and whole bare loops alternate, ``--rounds`` times each.
  On a GPU neither side waits for the device every step, so a step's timestamp is when it was queued: each
  side must run alone for its steps to overlap as they do in real use.

Reported: per side the median step after ``--warmup`` steps of every round and the mean over that window;
the ratio dmlplug / bare of the medians, and the geometric mean of the paired ratios (per step when
interleaved, per round otherwise) with its 95% interval, which says whether the run resolved a 3%
difference at all.

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


class BareLoop:
    """A hand-written PyTorch + PML training loop over ``p``'s shapes, one :meth:`step` at a time."""

    def __init__(self, p: Preset, workers: int, steps: int, source):
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

        self.p, self.torch = p, torch
        self.model = Net().to(p.device)
        if p.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        sampler = samplers.MPerClassSampler(source.labels, m=p.m, batch_size=p.batch_size,
                                            length_before_new_iter=steps * p.batch_size)
        self.loader = DataLoader(Images(), batch_size=p.batch_size, sampler=sampler, num_workers=workers,
                                 pin_memory=p.device == "cuda", drop_last=True)
        self.batches = iter(self.loader)
        self.loss_fn, self.miner = losses.MultiSimilarityLoss(), miners.MultiSimilarityMiner()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3, weight_decay=1e-4)
        self.model.train()

    def step(self) -> None:
        """Load the next batch and train on it."""
        torch, p = self.torch, self.p
        images, labels = next(self.batches)
        images = images.to(p.device, non_blocking=True)
        if p.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        labels = labels.to(p.device, non_blocking=True)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=p.bf16):
            emb = self.model(images)
        emb = emb.float()
        loss = self.loss_fn(emb, labels, self.miner(emb, labels))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def close(self) -> None:
        """Stop the loader's workers now (the iterator's last reference)."""
        del self.batches


class StepClock:
    """A throwaway plugin timing the steps of the run in progress, optionally with a bare step in each hook.

    Without ``bare``: ``dmlplug`` holds the intervals between successive ``on_step_end`` calls. With
    ``bare``: every hook runs one bare step and times it; ``dmlplug`` holds the intervals from the end of
    one hook to the start of the next (one whole dmlplug step without the bare one).
    """

    def __init__(self, bare: BareLoop | None = None):
        self.bare = bare
        self.dmlplug: list[float] = []
        self.bare_times: list[float] = []
        self._last: float | None = None

    @hookimpl
    def on_step_end(self, run, step, losses):
        now = time.perf_counter()
        if self._last is not None:
            self.dmlplug.append(now - self._last)
        if self.bare is not None:
            self.bare.step()
            done = time.perf_counter()
            self.bare_times.append(done - now)
            now = done
        self._last = now


def run_dmlplug(p: Preset, workers: int, steps: int, out: Path, bare: BareLoop | None = None,
                extra: tuple[str, ...] = ()) -> StepClock:
    """One dmlplug run of ``steps`` steps, timed by a :class:`StepClock` (with ``bare`` steps interleaved).

    ``extra`` overrides come last (``--set``: e.g. ``run.log_every=1`` to measure what logging costs).
    """
    import dmlplug
    from dmlplug.plugins import get_host

    clock = StepClock(bare)
    host = get_host()
    host.pm.register(clock, "train-speed-clock")
    try:
        dmlplug.run(RECIPE, overrides=[*dmlplug_overrides(p, workers, steps), *extra], out=out, quiet=True)
    finally:
        host.pm.unregister(clock)
    return clock


def run_bare(p: Preset, workers: int, steps: int, source) -> list[float]:
    """Step times (s) of the bare loop alone over ``steps`` batches (the first has no predecessor: dropped)."""
    loop = BareLoop(p, workers, steps, source)
    times = []
    for _ in range(steps):
        loop.step()
        times.append(time.perf_counter())  # no device sync: on a GPU the window mean is the honest figure
    loop.close()
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def geometric_interval(ratios: list[float]) -> tuple[float, float, float]:
    """Geometric mean of ``ratios`` and its 95% interval (Student's t on the log ratios)."""
    import math

    from scipy.stats import t

    logs = [math.log(r) for r in ratios]
    centre = statistics.fmean(logs)
    half = float(t.ppf(0.975, len(logs) - 1)) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean of ``values`` and its 95% interval (Student's t)."""
    import math

    from scipy.stats import t

    centre = statistics.fmean(values)
    half = float(t.ppf(0.975, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))
    return centre, centre - half, centre + half


def measure(p: Preset, mode: str, workers: int, steps: int, warmup: int, rounds: int, source,
            tmp: Path, extra: tuple[str, ...] = ()) -> tuple[dict[str, list[float]], list[float], list[float]]:
    """Timed steps per side (warm-up dropped), the paired ratios and the paired differences dmlplug − bare (s).

    Pairs are per step when interleaved, per round (of the medians) otherwise.
    """
    timed: dict[str, list[float]] = {"dmlplug": [], "bare": []}
    pairs: list[float] = []
    differences: list[float] = []
    for r in range(rounds):
        out = tmp / f"w{workers}r{r}"
        if mode == "interleaved":
            bare = BareLoop(p, workers, steps, source)
            clock = run_dmlplug(p, workers, steps, out, bare, extra)
            bare.close()
            # dmlplug[i] is the step after bare_times[i]: pair each with the bare step just before it
            d, b = clock.dmlplug[warmup - 1:], clock.bare_times[warmup - 1:len(clock.dmlplug)]
            pairs += [x / y for x, y in zip(d, b, strict=True)]
            differences += [x - y for x, y in zip(d, b, strict=True)]
        else:
            # alternate which side goes first, so a slow phase of the machine hits both
            sides = {}
            for side in (("dmlplug", "bare") if r % 2 == 0 else ("bare", "dmlplug")):
                t = run_dmlplug(p, workers, steps, out, extra=extra).dmlplug if side == "dmlplug" else run_bare(
                    p, workers, steps, source)
                sides[side] = t[warmup - 1:]  # t[0] is the time between steps 1 and 2
            d, b = sides["dmlplug"], sides["bare"]
            pairs.append(statistics.median(d) / statistics.median(b))
            differences.append(statistics.median(d) - statistics.median(b))
        timed["dmlplug"] += d
        timed["bare"] += b
        print(f"workers={workers} round {r + 1}/{rounds}: bare {statistics.median(b) * 1e3:.1f} ms, "
              f"dmlplug {statistics.median(d) * 1e3:.1f} ms", flush=True)
    return timed, pairs, differences


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--mode", choices=["interleaved", "rounds"], default=None,
                        help="how the sides alternate (default: interleaved on CPU, rounds on a GPU)")
    parser.add_argument("--workers", default=None, help="comma-separated worker counts (default: the preset's)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps per round (default 60, quick 12)")
    parser.add_argument("--warmup", type=int, default=None, help="steps of each round not counted (default 5)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds per side (default: 4 interleaved, 16 alternating; quick 1)")
    parser.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                        help="an extra override of dmlplug's recipe (repeatable), e.g. run.log_every=1")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    args = parser.parse_args(argv)
    p = PRESETS[args.preset]
    mode = args.mode or ("interleaved" if p.device == "cpu" else "rounds")
    steps = args.steps or (12 if args.quick else 60)
    warmup = args.warmup if args.warmup is not None else (3 if args.quick else 5)
    rounds = args.rounds or (1 if args.quick else 4 if mode == "interleaved" else 16)
    workers = [int(w) for w in args.workers.split(",")] if args.workers else p.workers
    if warmup >= steps - 1:
        parser.error("--warmup must leave at least two timed steps")
    if mode == "rounds" and rounds < 3:
        parser.error("--mode rounds needs --rounds 3 or more for an interval")

    import torch

    if p.device == "cuda" and not torch.cuda.is_available():
        print(f"train_speed: the {args.preset!r} preset needs CUDA, and torch.cuda.is_available() is False "
              "on this machine; run it on a GPU machine, or use --preset cpu", file=sys.stderr)
        return 2
    import dmlplug

    bundle = dmlplug.create("dataset", "glyphs", num_classes=p.num_classes, images_per_class=p.images_per_class)
    print(f"preset {args.preset}: {p.model}, {p.image_size} px, batch {p.batch_size} (m={p.m}), "
          f"{'bf16' if p.bf16 else 'fp32'}{', channels_last' if p.channels_last else ''}, device {p.device}, "
          f"{mode}, {steps} steps x {rounds} rounds, first {warmup} of each round not counted"
          + (f"; dmlplug with {' '.join(args.extra)}" if args.extra else ""))
    with tempfile.TemporaryDirectory() as tmp:
        for w in workers:
            timed, pairs, differences = measure(p, mode, w, steps, warmup, rounds, bundle.train, Path(tmp),
                                                tuple(args.extra))
            med = {side: statistics.median(t) for side, t in timed.items()}
            mean = {side: statistics.fmean(t) for side, t in timed.items()}
            for side in ("bare", "dmlplug"):
                print(f"workers={w} {side:8s} median step {med[side] * 1e3:8.1f} ms  "
                      f"{p.batch_size / med[side]:8.0f} images/s  (mean {mean[side] * 1e3:.1f} ms, "
                      f"{len(timed[side])} steps)")
            centre, low, high = geometric_interval(pairs)
            unit = "steps" if mode == "interleaved" else "rounds"
            print(f"workers={w} ratio dmlplug / bare = {med['dmlplug'] / med['bare']:.3f} (medians), "
                  f"{mean['dmlplug'] / mean['bare']:.3f} (means); paired: {centre:.3f}, 95% interval "
                  f"{low:.3f}-{high:.3f} ({len(pairs)} {unit})")
            # the overhead in absolute terms: what a faster step (a GPU's) would expose as a larger ratio
            extra_s, extra_low, extra_high = mean_interval(differences)
            typical = statistics.median(differences)  # robust to the machine's slow outliers
            print(f"workers={w} overhead dmlplug - bare (paired mean): {extra_s * 1e3:+.2f} ms per step "
                  f"(95% interval {extra_low * 1e3:+.2f} to {extra_high * 1e3:+.2f}), "
                  f"{extra_s / p.batch_size * 1e6:+.1f} us per image; median of the pairs {typical * 1e3:+.2f} ms "
                  f"({typical / p.batch_size * 1e6:+.1f} us per image)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
