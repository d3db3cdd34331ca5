"""Data-parallel training on CPU with the gloo backend and 2 processes.

* The engine's distributed step (model outputs gathered with gradients, losses and miners on the global
  batch, model gradients summed, loss parameters averaged) gives the same parameters after a few steps as a
  single process on the concatenated batch, for a miner + tuple loss and a parametric (proxy) loss.
* The same through ``DistributedDataParallel`` (:mod:`dmlplug.engine.ddp`, summing hook): an unused head, a
  second forward pass on the plain model and a backbone freeze (DDP rebuilt) still give the single-process
  parameters.
* Sharded evaluation returns every embedding once, in order; batch plans give equal slices per rank.
* A short recipe runs end to end under torchrun, with one set of files written by rank 0, and ends with the
  same weights as the single-process run of the same recipe.
* On a later machine of a multi-node job the process group rank comes from ``RANK``, the GPU from ``LOCAL_RANK``
  (two loopback "nodes" under torchrun: ``test_multinode.py``).
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch
from e2e import ROOT

from dmlplug.engine import distributed
from dmlplug.engine.batches import BatchPlan, check_batch_size

STEPS, BATCH, DIM, CLASSES = 3, 16, 6, 4


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _problem():
    """A model, a parametric loss, a miner-driven tuple loss and STEPS global batches (fixed seeds)."""
    from pytorch_metric_learning import losses, miners

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(DIM, 12), torch.nn.ReLU(), torch.nn.Linear(12, 5))
    proxy = losses.ProxyAnchorLoss(num_classes=CLASSES, embedding_size=5)
    triplet, miner = losses.TripletMarginLoss(margin=0.2), miners.MultiSimilarityMiner(epsilon=0.5)
    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randn(BATCH, DIM, generator=generator), torch.arange(BATCH) % CLASSES) for _ in range(STEPS)]
    optimizer = torch.optim.SGD([*model.parameters(), *proxy.parameters()], lr=0.5)
    return model, proxy, triplet, miner, batches, optimizer


def _train(model, proxy, triplet, miner, batches, optimizer, rank=0, world=1, gatherer=None):
    for x, y in batches:
        size = BATCH // world
        x, y = x[rank * size:(rank + 1) * size], y[rank * size:(rank + 1) * size]
        if world > 1:
            y = distributed.gather_plain(y)
            gatherer.active = True
        emb = torch.nn.functional.normalize(model(x), dim=1)
        if gatherer is not None:
            gatherer.active = False
        loss = proxy(emb, y) + triplet(emb, y, miner(emb, y))
        optimizer.zero_grad()
        loss.backward()
        distributed.sum_gradients(list(model.parameters()), [*model.parameters(), *proxy.parameters()])
        optimizer.step()
    return {"model": {k: v.clone() for k, v in model.state_dict().items()}, "proxies": proxy.proxies.detach().clone()}


class _Items(torch.utils.data.Dataset):
    def __init__(self, n):
        self.x = torch.randn(n, 3, 4, 4, generator=torch.Generator().manual_seed(2))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], i % 3, i


class _Embedder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.lin = torch.nn.Linear(48, 4)

    def embed(self, images):
        return self.lin(images.flatten(1))


def _worker(rank, world, port, out_dir):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model, proxy, triplet, miner, batches, optimizer = _problem()
        gatherer = distributed.OutputGatherer()
        gatherer.attach(model)
        trained = _train(model, proxy, triplet, miner, batches, optimizer, rank, world, gatherer)
        emb, labels = distributed.embed_dataset(_Embedder(), _Items(7), batch_size=2, workers=0, device="cpu")
        plan = BatchPlan([list(range(8)), list(range(8, 16)), list(range(16, 24))], rank, world)
        plan.set_epoch(1, skip=1)
        torch.save({"trained": trained, "emb": emb, "labels": labels, "plan": list(plan),
                    "info": distributed.current()}, os.path.join(out_dir, f"rank{rank}.pt"))
        # As the engine does (launch.py): every rank waits for the others before destroying its gloo group. A
        # rank that leaves while its last asynchronous send may still be in flight aborted once in CI (SIGABRT,
        # "terminate called without an active exception", the other rank still running).
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_two_gloo_processes_match_one_process_on_the_concatenated_batch(tmp_path):
    torch.multiprocessing.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    single = _train(*_problem())
    reference_emb, reference_labels = distributed.embed_dataset(_Embedder(), _Items(7), batch_size=3, workers=0,
                                                                 device="cpu")
    first = _problem()[0].state_dict()
    for rank in (0, 1):
        got = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        assert got["info"] == distributed.DistInfo(rank, 2, 0)
        for name, value in single["model"].items():
            assert not torch.allclose(value, first[name])  # training moved the parameters
            torch.testing.assert_close(got["trained"]["model"][name], value, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got["trained"]["proxies"], single["proxies"], rtol=1e-5, atol=1e-6)
        # Batches of 2 (per rank) vs 3 (reference): float32 matmuls of other shapes may take other BLAS kernels
        # and sum in another order (measured here: 3.7e-8 absolute on a value of 0.028, 1.35e-6 relative), so
        # the same float32 tolerance as the trained parameters above; a wrong item or order is off by ~1.
        np.testing.assert_allclose(got["emb"], reference_emb, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got["labels"], reference_labels)
        assert got["plan"] == [list(range(8 + 4 * rank, 12 + 4 * rank)), list(range(16 + 4 * rank, 20 + 4 * rank))]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False)["trained"] for r in (0, 1)]
    for name in ranks[0]["model"]:  # ranks stay bit-identical
        assert torch.equal(ranks[0]["model"][name], ranks[1]["model"][name])
    assert torch.equal(ranks[0]["proxies"], ranks[1]["proxies"])


def _ddp_problem():
    """A two-head model (head ``b`` unused by the loss), a proxy loss and a tuple loss on a second view."""
    from pytorch_metric_learning import losses, miners

    torch.manual_seed(0)
    model = _TwoHeads()
    proxy = losses.ProxyAnchorLoss(num_classes=CLASSES, embedding_size=5)
    triplet, miner = losses.TripletMarginLoss(margin=0.2), miners.MultiSimilarityMiner(epsilon=0.5)
    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randn(BATCH, DIM, generator=generator), torch.arange(BATCH) % CLASSES)
               for _ in range(DDP_STEPS)]
    optimizer = torch.optim.SGD([*model.parameters(), *proxy.parameters()], lr=0.5)
    return model, proxy, triplet, miner, batches, optimizer


DDP_STEPS, FREEZE_AT = 4, 2


class _TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Linear(DIM, 12), torch.nn.ReLU())
        self.a, self.b = torch.nn.Linear(12, 5), torch.nn.Linear(12, 5)

    def forward(self, x):
        from dmlplug.engine.model import ModelOutput

        features = self.backbone(x)
        named = {"a": self.a(features), "b": self.b(features)}
        return ModelOutput(torch.nn.functional.normalize(named["a"], dim=1), features, None, named)


def _train_ddp(model, proxy, triplet, miner, batches, optimizer, rank=0, world=1, gatherer=None):
    """The engine's step: forward through DataParallelModel, a second (direct) forward on another view,
    proxies averaged after backward; the backbone is frozen from step FREEZE_AT on (DDP is rebuilt)."""
    from dmlplug.engine.ddp import DataParallelModel

    forward = DataParallelModel("cpu", enabled=world > 1)
    for step, (x, y) in enumerate(batches):
        if step == FREEZE_AT:
            for p in model.backbone.parameters():
                p.requires_grad_(False)
        size = BATCH // world
        x, y = x[rank * size:(rank + 1) * size], y[rank * size:(rank + 1) * size]
        if world > 1:
            y = distributed.gather_plain(y)
            gatherer.active = True
        out = forward(model, x)
        view = model(x * 0.5)  # a component calling the plain model on an extra view
        if gatherer is not None:
            gatherer.active = False
        second = torch.nn.functional.normalize(view.named["a"], dim=1)
        loss = proxy(out.embedding, y) + triplet(second, y, miner(second, y))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        forward.reduce(model)
        distributed.average_gradients(list(proxy.parameters()))
        optimizer.step()
    return {"model": {k: v.clone() for k, v in model.state_dict().items()}, "proxies": proxy.proxies.detach().clone(),
            "builds": forward.builds}


def _ddp_worker(rank, world, port, out_dir):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model, *rest = _ddp_problem()
        gatherer = distributed.OutputGatherer()
        gatherer.attach(model)
        trained = _train_ddp(model, *rest, rank=rank, world=world, gatherer=gatherer)
        torch.save(trained, os.path.join(out_dir, f"ddp{rank}.pt"))
        dist.barrier()  # see _worker
    finally:
        dist.destroy_process_group()


def test_ddp_step_matches_one_process_with_unused_head_second_view_and_freeze(tmp_path):
    """DistributedDataParallel with the summing hook gives the single-process parameters: the gradients of
    a second forward pass are reduced too, an unused head is tolerated, and a freeze rebuilds DDP."""
    torch.multiprocessing.spawn(_ddp_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    single = _train_ddp(*_ddp_problem())
    first = _ddp_problem()[0].state_dict()
    assert single["builds"] == 0  # a single process never builds DDP
    for name in ("a.weight", "backbone.0.weight"):  # trained (the backbone before the freeze)
        assert not torch.allclose(single["model"][name], first[name])
    torch.testing.assert_close(single["model"]["b.weight"], first["b.weight"])  # unused head: no gradient
    ranks = [torch.load(tmp_path / f"ddp{r}.pt", weights_only=False) for r in (0, 1)]
    for got in ranks:
        assert got["builds"] == 2  # after the first (probing) step, and again after the freeze's probing step
        for name, value in single["model"].items():
            torch.testing.assert_close(got["model"][name], value, rtol=1e-5, atol=1e-6, msg=name)
        torch.testing.assert_close(got["proxies"], single["proxies"], rtol=1e-5, atol=1e-6)
    for name in ranks[0]["model"]:  # ranks stay bit-identical
        assert torch.equal(ranks[0]["model"][name], ranks[1]["model"][name])
    assert torch.equal(ranks[0]["proxies"], ranks[1]["proxies"])


def test_shard_bounds_cover_every_item_once():
    for n in range(0, 12):
        for world in (1, 2, 3, 5):
            covered = [i for r in range(world) for i in range(*distributed.shard_bounds(n, r, world))]
            assert covered == list(range(n))


def test_batch_plan_seeds_samples_by_global_position():
    from dmlplug.engine.seeding import sample_seed

    batches = [[5, 6, 7, 8], [1, 2, 3, 4]]
    whole = BatchPlan(batches, seed=9)
    whole.set_epoch(3)
    halves = [BatchPlan(batches, rank, 2, seed=9) for rank in (0, 1)]
    for plan in halves:
        plan.set_epoch(3)
    seeds = [[i.seed for i in b] for b in whole]
    assert seeds[1][2] == sample_seed(9, 3, 6)
    assert [[i.seed for i in b] for b in halves[0]] == [s[:2] for s in seeds]
    assert [[i.seed for i in b] for b in halves[1]] == [s[2:] for s in seeds]
    assert len(set(sum(seeds, []))) == 8


def test_batch_size_must_split_over_the_ranks():
    from dmlplug.errors import RunError

    with pytest.raises(RunError, match="not divisible by the 3 processes"):
        check_batch_size(32, 3)
    check_batch_size(32, 2)


DDP_SETS = ["data.dataset.num_classes=40", "data.dataset.images_per_class=4", "data.batch_size=8",
            "data.sampler.m=2", "data.sampler.batches_per_epoch=3", "head.embedding_size=8", "run.epochs=1",
            "backbone.frozen_bn=true", "optimizer.name=sgd", "optimizer.lr=0.05"]


# Rank 0 alone receives SIGTERM during step 2: both ranks stop after that step, rank 0 checkpoints.
STOP_ON_RANK0 = """
import os, signal, sys
from dmlplug import hookimpl
from dmlplug.plugins import get_host
from dmlplug.cli import main

class Stop:
    @hookimpl
    def on_step_end(self, run, step, losses):
        if step == 2 and os.environ["RANK"] == "0":
            os.kill(os.getpid(), signal.SIGTERM)

get_host().pm.register(Stop(), "stop")
main(sys.argv[1:])
"""


def _torchrun(*args, cwd):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-port",
                           str(_free_port()), *map(str, args)], capture_output=True, text=True, timeout=600,
                          cwd=cwd, env=env)


def test_torchrun_two_processes_end_to_end_with_sigterm_and_resume(tiny_recipe, tmp_path):
    import dmlplug

    single = dmlplug.run(tiny_recipe, overrides=DDP_SETS, out=tmp_path / "single", quiet=True)
    sets = [arg for pair in DDP_SETS for arg in ("--set", pair)]
    run_dir = tmp_path / "ddp"
    script = tmp_path / "stop.py"
    script.write_text(STOP_ON_RANK0)
    proc = _torchrun(script, "run", tiny_recipe, "--out", run_dir, "--quiet", *sets, cwd=tmp_path)
    assert proc.returncode != 0 and "interrupted by SIGTERM at step 2" in proc.stderr, proc.stderr[:6000]
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert (state["step"], state["epoch_complete"], state["world_size"]) == (2, False, 2)
    assert json.loads((run_dir / "results.json").read_text())["status"] == "interrupted"

    proc = _torchrun("-m", "dmlplug", "run", run_dir, "--resume", "--quiet", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[:6000]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "completed" and results["steps"] == 3
    assert json.loads((run_dir / "environment.json").read_text())["world_size"] == 2
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [0, 1]  # written once, by rank 0
    assert proc.stdout.count('"run_dir"') == 2  # every rank returns; only rank 0 wrote files
    assert len((run_dir / "resume.jsonl").read_text().splitlines()) == 1
    a = torch.load(tmp_path / "single" / "checkpoints" / "last.pt", weights_only=False)
    b = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    for name, value in a["model"].items():
        torch.testing.assert_close(b["model"][name], value, rtol=1e-4, atol=1e-5, msg=name)
    assert results["initial_metrics"] == single.initial_metrics


def test_setup_on_the_second_node_uses_local_rank_for_the_gpu_and_rank_for_the_process(monkeypatch):
    """Global rank 3 of 4 is local rank 1 on its node: it trains on cuda:1, not cuda:3 (multi-node torchrun)."""
    import torch.distributed as dist

    calls = {}
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: calls.setdefault("device", index))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda **kwargs: calls.setdefault("group", kwargs))
    for key, value in dict(WORLD_SIZE="4", RANK="3", LOCAL_RANK="1", MASTER_ADDR="node0", MASTER_PORT="29500").items():
        monkeypatch.setenv(key, value)
    info, device = distributed.setup("cuda")
    assert (info, device) == (distributed.DistInfo(rank=3, world_size=4, local_rank=1), "cuda:1")
    assert calls == {"device": 1, "group": {"backend": "nccl", "init_method": "env://"}}
    assert not info.is_main  # rank 0 of the second node is not the main process
