"""Gradient reduction under data parallelism: DistributedDataParallel vs one flattened all-reduce after backward.

Two processes (gloo, CPU, one thread each) train two identically initialised copies of a timm model with the
engine's distributed step: model outputs gathered with gradients (``OutputGatherer``), Multi-Similarity loss
and miner on the global batch, Adam. The copies differ only in how the model's gradients are summed over
the ranks:

* ``flat``: the plain model, then :func:`dmlplug.engine.distributed.sum_gradients` after backward (one
  flattened all-reduce per dtype, not overlapped with the backward pass);
* ``ddp``: the forward through :class:`dmlplug.engine.ddp.DataParallelModel` (``DistributedDataParallel``
  with a summing communication hook: bucketed all-reduces overlapped with the backward pass).

The variants alternate step by step (their order flips every step) on the same global batches; step time is
measured on rank 0 between barriers; medians after warm-up and the ratio ``ddp / flat`` are printed, and the
two copies' parameters are compared at the end (they must agree: the same gradients were applied).

Usage::

    python benchmarks/ddp_speed.py                      # resnet10t, resnet18, resnet50 at 32 px, batch 64
    python benchmarks/ddp_speed.py --quick              # resnet10t, a few steps (smoke run)
    python benchmarks/ddp_speed.py --models resnet50 --image-size 64 --steps 30
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Net(torch.nn.Module):
    """timm backbone (pooled features) + linear head, returning the engine's ``ModelOutput``."""

    def __init__(self, name: str, dim: int) -> None:
        import timm

        super().__init__()
        self.backbone = timm.create_model(name, pretrained=False, num_classes=0)
        self.head = torch.nn.Linear(self.backbone.num_features, dim)

    def forward(self, images: torch.Tensor) -> object:
        from dmlplug.engine.model import ModelOutput

        features = self.backbone(images)
        return ModelOutput(torch.nn.functional.normalize(self.head(features), dim=1), features)


def _step(forward, model, optimizer, gatherer, images, labels, criteria, other) -> None:
    loss_fn, miner = criteria
    gatherer.active = True
    try:
        out = forward(model, images)
    finally:
        gatherer.active = False
    loss = loss_fn(out.embedding, labels, miner(out.embedding, labels))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    other(model)
    optimizer.step()


def _worker(rank: int, world: int, port: int, args: argparse.Namespace, out_file: str) -> None:
    import torch.distributed as dist
    from pytorch_metric_learning import losses, miners

    from dmlplug.engine import distributed
    from dmlplug.engine.ddp import DataParallelModel

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = {}
    try:
        for name in args.models:
            torch.manual_seed(0)
            flat_model = _Net(name, args.dim)
            ddp_model = copy.deepcopy(flat_model)
            gatherer = distributed.OutputGatherer()
            gatherer.attach(flat_model)
            gatherer.attach(ddp_model)
            criteria = (losses.MultiSimilarityLoss(), miners.MultiSimilarityMiner())
            wrapper = DataParallelModel("cpu")
            variants = {
                "flat": (lambda m, x: m(x), flat_model, torch.optim.Adam(flat_model.parameters(), lr=1e-3),
                         lambda m: distributed.sum_gradients(list(m.parameters()), [])),
                "ddp": (wrapper, ddp_model, torch.optim.Adam(ddp_model.parameters(), lr=1e-3),
                        lambda m, w=wrapper: (w.reduce(m), distributed.average_gradients([]))),
            }
            times: dict[str, list[float]] = {"flat": [], "ddp": []}
            per_rank = args.batch // world
            classes = args.batch // 4
            for step in range(args.warmup + args.steps):
                generator = torch.Generator().manual_seed(step)
                images = torch.randn(args.batch, 3, args.image_size, args.image_size, generator=generator)
                labels = torch.arange(classes).repeat_interleave(4)[torch.randperm(args.batch, generator=generator)]
                images = images[rank * per_rank:(rank + 1) * per_rank]
                order = ("flat", "ddp") if step % 2 == 0 else ("ddp", "flat")
                for variant in order:
                    forward, model, optimizer, other = variants[variant]
                    dist.barrier()
                    start = time.perf_counter()
                    _step(forward, model, optimizer, gatherer, images, labels, criteria, other)
                    elapsed = time.perf_counter() - start
                    if step >= args.warmup:
                        times[variant].append(elapsed)
            pairs = zip(flat_model.parameters(), ddp_model.parameters(), strict=True)
            diff = max(float((a - b).detach().abs().max()) for a, b in pairs)
            params = sum(p.numel() for p in flat_model.parameters())
            results[name] = {"flat": times["flat"], "ddp": times["ddp"], "max_param_diff": diff,
                             "params": params, "ddp_builds": wrapper.builds}
        if rank == 0:
            Path(out_file).write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print one line per model."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet10t,resnet18,resnet50", help="comma-separated timm models")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch", type=int, default=64, help="global batch (split over the 2 processes)")
    parser.add_argument("--dim", type=int, default=64, help="embedding size")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="resnet10t, 4 timed steps: a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.steps, args.warmup = "resnet10t", 4, 1
    args.models = [m for m in args.models.split(",") if m]
    world = 2
    with tempfile.TemporaryDirectory() as tmp:
        out_file = os.path.join(tmp, "results.json")
        torch.multiprocessing.spawn(_worker, args=(world, _free_port(), args, out_file), nprocs=world, join=True)
        results = json.loads(Path(out_file).read_text())
    print(f"2 processes, gloo, CPU, 1 thread each; global batch {args.batch}, {args.image_size} px, "
          f"{args.steps} timed steps per variant after {args.warmup} warm-up, alternating")
    print(f"{'model':<12} {'params':>10} {'flat ms':>9} {'ddp ms':>9} {'ddp/flat':>9} {'max |Δparam|':>13}")
    for name, r in results.items():
        flat, ddp = statistics.median(r["flat"]) * 1e3, statistics.median(r["ddp"]) * 1e3
        print(f"{name:<12} {r['params']:>10,} {flat:>9.1f} {ddp:>9.1f} {ddp / flat:>9.3f} "
              f"{r['max_param_diff']:>13.2e}")
        if r["max_param_diff"] > 1e-3:
            print(f"  warning: {name}: the two variants' parameters differ", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
