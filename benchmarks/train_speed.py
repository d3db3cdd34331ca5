"""Training step time of dmlplug against a bare PyTorch + PML loop doing the same work.

Both sides train the same model (timm backbone without classifier, average pooling, a linear layer,
L2-normalised), on batches of the same size from PML's ``MPerClassSampler`` (same ``m``), with the
Multi-Similarity loss and miner and Adam, over the same glyph images with the same augmentation parameters,
loaded by a DataLoader with the same number of workers. dmlplug trains through :func:`dmlplug.run` on
``recipes/quickstart.toml`` with overrides (exactly what a user runs, loggers included); an in-process
plugin's ``on_step_end`` marks its steps, so a step's time includes loading its batch, as a user sees it.

Two bare loops, two comparisons (``--against``):

* ``hand`` (**dmlplug vs what a user writes**): a ``Dataset`` over the glyph images' numpy array that makes
  an RGB PIL image of each and applies the torchvision v1 transform users write (as in PML's and timm's
  examples): ``Compose([RandomResizedCrop(size, scale, ratio), (RandomHorizontalFlip(),) ToTensor(),
  Normalize(mean, std)])`` with the parameters of dmlplug's policy (``light``: scale 0.7-1, ratio 0.9-1.1;
  ``dml``: torchvision's defaults and a flip; ``none``: ``Resize((size, size))``). No dmlplug code runs on
  this side: the array and labels are taken out of the dataset once, before timing.
* ``engine`` (**the engine's cost alone**): the same bare loop, but loading and transforming images with
  dmlplug's own data pipeline (the source's ``load_tensor`` and the policy of ``build_transform``), so the
  two sides differ by the engine only.

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

First, the data pipelines alone: thread CPU time per image of the hand-written one, of the same augmentation
as a torchvision v2 ``Compose`` (dmlplug's pipeline before its lean steps) and of dmlplug's, in one process.
Then, per comparison: per side the median step after ``--warmup`` steps of every round and the mean over
that window; the ratio dmlplug / bare of the medians, and the geometric mean of the paired ratios (per step when
interleaved, per round otherwise) with its 95% interval, which says whether the run resolved a 3%
difference at all.

Examples::

    python benchmarks/train_speed.py                    # CPU preset: quickstart shapes, workers 0 and 2
    python benchmarks/train_speed.py --quick            # smoke run: fewer steps and rounds
    python benchmarks/train_speed.py --preset gpu       # ResNet-50, 224 px, batch 112, bf16, channels_last
    python benchmarks/train_speed.py --against hand     # only the comparison with the hand-written loop
    python benchmarks/train_speed.py --workers 0 --clock cpu   # CPU time: a direction on a loaded machine
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from train_speed_bare import AGAINST, BareLoop, transform_costs

from dmlplug import hookimpl

ROOT = Path(__file__).resolve().parents[1]

#: What a step is timed with: wall clock, or (``--clock cpu``) this process's CPU time.
CLOCK = {"now": time.perf_counter}
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
    """A throwaway plugin timing the steps of the run in progress, optionally with bare steps in each hook.

    Without ``bares``: ``dmlplug`` holds the intervals between successive ``on_step_end`` calls. With
    ``bares`` (``{comparison: BareLoop}``): every hook runs one step of each bare loop (their order alternating
    from hook to hook) and times it in ``bare_times[comparison]``; ``dmlplug`` holds the intervals from the
    end of one hook to the start of the next (one whole dmlplug step without the bare ones).
    """

    def __init__(self, bares: dict[str, BareLoop] | None = None):
        self.bares = bares or {}
        self.dmlplug: list[float] = []
        self.bare_times: dict[str, list[float]] = {name: [] for name in self.bares}
        self._last: float | None = None

    @hookimpl
    def on_step_end(self, run, step, losses):
        now = CLOCK["now"]()
        if self._last is not None:
            self.dmlplug.append(now - self._last)
        names = list(self.bares)
        for name in (names if len(self.dmlplug) % 2 == 0 else names[::-1]):
            self.bares[name].step()
            done = CLOCK["now"]()
            self.bare_times[name].append(done - now)
            now = done
        self._last = now


def run_dmlplug(p: Preset, workers: int, steps: int, out: Path, bares: dict[str, BareLoop] | None = None,
                extra: tuple[str, ...] = ()) -> StepClock:
    """One dmlplug run of ``steps`` steps, timed by a :class:`StepClock` (with ``bares``' steps interleaved).

    ``extra`` overrides come last (``--set``: e.g. ``run.log_every=1`` to measure what logging costs).
    """
    import dmlplug
    from dmlplug.plugins import get_host

    clock = StepClock(bares)
    host = get_host()
    host.pm.register(clock, "train-speed-clock")
    try:
        dmlplug.run(RECIPE, overrides=[*dmlplug_overrides(p, workers, steps), *extra], out=out, quiet=True)
    finally:
        host.pm.unregister(clock)
    return clock


def run_bare(p: Preset, workers: int, steps: int, source, against: str) -> list[float]:
    """Step times (s) of a bare loop alone over ``steps`` batches (the first has no predecessor: dropped)."""
    loop = BareLoop(p, workers, steps, source, against)
    times = []
    for _ in range(steps):
        loop.step()
        times.append(CLOCK["now"]())  # no device sync: on a GPU the window mean is the honest figure
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


@dataclass
class Comparison:
    """The timed steps of one comparison: dmlplug's and its bare loop's, with their pairs."""

    dmlplug: list[float]
    bare: list[float]
    pairs: list[float]  # dmlplug / bare
    differences: list[float]  # dmlplug - bare (s)


def measure(p: Preset, mode: str, workers: int, steps: int, warmup: int, rounds: int, source, tmp: Path,
            against: list[str], extra: tuple[str, ...] = ()) -> dict[str, Comparison]:
    """Timed steps per side (warm-up dropped) and the paired ratios and differences, per comparison.

    Pairs are per step when interleaved (each dmlplug step with the step of each bare loop just before it),
    per round (of the medians) otherwise.
    """
    results = {name: Comparison([], [], [], []) for name in against}
    for r in range(rounds):
        out = tmp / f"w{workers}r{r}"
        if mode == "interleaved":
            bares = {name: BareLoop(p, workers, steps, source, name) for name in against}
            clock = run_dmlplug(p, workers, steps, out, bares, extra)
            for bare in bares.values():
                bare.close()
            # dmlplug[i] is the step after bare_times[i]: pair each with the bare steps just before it
            d = clock.dmlplug[warmup - 1:]
            sides = {name: (d, clock.bare_times[name][warmup - 1:len(clock.dmlplug)]) for name in against}
            for name, (d, b) in sides.items():
                results[name].pairs.extend(x / y for x, y in zip(d, b, strict=True))
                results[name].differences.extend(x - y for x, y in zip(d, b, strict=True))
        else:
            # alternate the order of the sides, so a slow phase of the machine hits all of them
            order = ["dmlplug", *against]
            timed = {}
            for side in (order if r % 2 == 0 else order[::-1]):
                t = (run_dmlplug(p, workers, steps, out / side, extra=extra).dmlplug if side == "dmlplug"
                     else run_bare(p, workers, steps, source, side))
                timed[side] = t[warmup - 1:]  # t[0] is the time between steps 1 and 2
            sides = {name: (timed["dmlplug"], timed[name]) for name in against}
            for name, (d, b) in sides.items():
                results[name].pairs.append(statistics.median(d) / statistics.median(b))
                results[name].differences.append(statistics.median(d) - statistics.median(b))
        for name, (d, b) in sides.items():
            results[name].dmlplug += d
            results[name].bare += b
        print(f"workers={workers} round {r + 1}/{rounds}: dmlplug {statistics.median(d) * 1e3:.1f} ms, "
              + ", ".join(f"{name} {statistics.median(b) * 1e3:.1f} ms" for name, (_, b) in sides.items()),
              flush=True)
    return results


def report(p: Preset, mode: str, workers: int, name: str, c: Comparison) -> None:
    """Print one comparison: per side, the ratios, the overhead in absolute terms."""
    print(f"workers={workers} dmlplug vs {AGAINST[name]}")
    med = {"bare": statistics.median(c.bare), "dmlplug": statistics.median(c.dmlplug)}
    mean = {"bare": statistics.fmean(c.bare), "dmlplug": statistics.fmean(c.dmlplug)}
    for side, times in (("bare", c.bare), ("dmlplug", c.dmlplug)):
        label = name if side == "bare" else side
        print(f"  {label:8s} median step {med[side] * 1e3:8.1f} ms  {p.batch_size / med[side]:8.0f} images/s  "
              f"(mean {mean[side] * 1e3:.1f} ms, {len(times)} steps)")
    centre, low, high = geometric_interval(c.pairs)
    unit = "steps" if mode == "interleaved" else "rounds"
    print(f"  ratio dmlplug / {name} = {med['dmlplug'] / med['bare']:.3f} (medians), "
          f"{mean['dmlplug'] / mean['bare']:.3f} (means); paired: {centre:.3f}, 95% interval "
          f"{low:.3f}-{high:.3f} ({len(c.pairs)} {unit})")
    # the overhead in absolute terms: what a faster step (a GPU's) would expose as a larger ratio
    extra_s, extra_low, extra_high = mean_interval(c.differences)
    typical = statistics.median(c.differences)  # robust to the machine's slow outliers
    print(f"  dmlplug - {name} (paired mean): {extra_s * 1e3:+.2f} ms per step "
          f"(95% interval {extra_low * 1e3:+.2f} to {extra_high * 1e3:+.2f}), "
          f"{extra_s / p.batch_size * 1e6:+.1f} us per image; median of the pairs {typical * 1e3:+.2f} ms "
          f"({typical / p.batch_size * 1e6:+.1f} us per image)")


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
    parser.add_argument("--against", default="hand,engine",
                        help="comma-separated bare loops to compare with: hand (hand-written data pipeline), "
                        "engine (dmlplug's data pipeline: the engine alone); default both")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="wall (default): wall-clock steps; cpu: this process's CPU time with one torch thread, "
                        "for a direction on a loaded machine (workers 0 only: workers' time is not this process's)")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    args = parser.parse_args(argv)
    p = PRESETS[args.preset]
    mode = args.mode or ("interleaved" if p.device == "cpu" else "rounds")
    steps = args.steps or (12 if args.quick else 60)
    warmup = args.warmup if args.warmup is not None else (3 if args.quick else 5)
    rounds = args.rounds or (1 if args.quick else 4 if mode == "interleaved" else 16)
    workers = [int(w) for w in args.workers.split(",")] if args.workers else p.workers
    against = [name.strip() for name in args.against.split(",") if name.strip()]
    if not against or set(against) - set(AGAINST):
        parser.error(f"--against takes a comma-separated subset of {', '.join(AGAINST)}")
    if args.clock == "cpu" and (any(workers) or p.device != "cpu"):
        parser.error("--clock cpu times this process only: use it with --workers 0 on the cpu preset")
    if warmup >= steps - 1:
        parser.error("--warmup must leave at least two timed steps")
    if mode == "rounds" and rounds < 3:
        parser.error("--mode rounds needs --rounds 3 or more for an interval")

    import torch

    if args.clock == "cpu":
        torch.set_num_threads(1)  # other threads' spinning would count as CPU time on a loaded machine
        CLOCK["now"] = time.process_time
    if p.device == "cuda" and not torch.cuda.is_available():
        print(f"train_speed: the {args.preset!r} preset needs CUDA, and torch.cuda.is_available() is False "
              "on this machine; run it on a GPU machine, or use --preset cpu", file=sys.stderr)
        return 2
    import dmlplug

    bundle = dmlplug.create("dataset", "glyphs", num_classes=p.num_classes, images_per_class=p.images_per_class)
    print(f"preset {args.preset}: {p.model}, {p.image_size} px, batch {p.batch_size} (m={p.m}), "
          f"{'bf16' if p.bf16 else 'fp32'}{', channels_last' if p.channels_last else ''}, device {p.device}, "
          f"{mode}, {steps} steps x {rounds} rounds, first {warmup} of each round not counted"
          + (", timed in process CPU time, one torch thread" if args.clock == "cpu" else "")
          + (f"; dmlplug with {' '.join(args.extra)}" if args.extra else ""))
    for name in against:
        print(f"{name}: {AGAINST[name]}")
    costs = transform_costs(p, bundle.train, rounds=3 if args.quick else 10)
    hand_us = costs["hand-written (v1 on PIL)"]
    print("data pipeline alone, thread CPU time per image (one torch thread, median):")
    for name, us in costs.items():
        print(f"  {name:32s} {us:7.1f} us/image  {us / hand_us:5.2f}x the hand-written  "
              f"{(us - hand_us) * p.batch_size / 1e3:+6.2f} ms per {p.batch_size}-image batch")
    with tempfile.TemporaryDirectory() as tmp:
        for w in workers:
            results = measure(p, mode, w, steps, warmup, rounds, bundle.train, Path(tmp), against,
                              tuple(args.extra))
            for name, comparison in results.items():
                report(p, mode, w, name, comparison)
    return 0


if __name__ == "__main__":
    sys.exit(main())
