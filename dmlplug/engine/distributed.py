"""Data-parallel training over several processes (``torchrun``): gathers, gradient sums, sharded evaluation.

How a distributed step works (see docs/distributed.md):

* The recipe's ``data.batch_size`` is the *global* batch: the batch sampler yields the same global batch on
  every rank (it depends on ``(seed, epoch)`` only) and :class:`~dmlplug.engine.batches.BatchPlan` hands
  rank ``r`` the slice ``[r * b, (r + 1) * b)`` with ``b = batch_size / world_size`` (equal batch sizes on
  every rank).
* Every model output produced inside a training step is all-gathered along the batch dimension, keeping the
  gradient of the rank's own slice (:func:`gather_with_grad`). Losses, miners and regularizers therefore see
  the global batch (with gathered labels and indices), exactly as a single process would, and every rank
  computes the same loss value.
* Each rank's backward pass then yields the part of the global gradient that flows through its own samples;
  the model's gradients must be **summed** over ranks, which gives exactly the single-process gradient. The
  training forward runs through ``DistributedDataParallel`` (:mod:`dmlplug.engine.ddp`), whose bucketed
  all-reduce overlaps the backward pass; a communication hook makes it sum instead of average, so neither
  the loss nor any other gradient is rescaled. The parameters of parametric losses and regularizers
  (proxies …) are not part of the model and already receive the full gradient on every rank; they are
  averaged after backward (:func:`average_gradients`), which keeps them bit-identical across ranks.
  :func:`sum_gradients` is the one-call reduction of both kinds, without DDP.
* BatchNorm: on CUDA the model is converted to SyncBatchNorm; buffers are broadcast from rank 0 before
  evaluation and checkpointing (DDP's per-forward buffer broadcast is off: it would cost a collective per
  step and change nothing that is saved or evaluated).
* Evaluation is sharded: rank ``r`` embeds a contiguous block of the split, blocks are gathered in order
  (padding removed), so every rank holds the full embedding matrix once, without duplicates.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dmlplug.errors import RunError


@dataclass(frozen=True)
class DistInfo:
    """Where this process stands in the process group."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        """True when there is more than one process."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on rank 0, the only rank with side effects (files, loggers, progress bars)."""
        return self.rank == 0


def env_world_size() -> int:
    """``WORLD_SIZE`` as set by torchrun (1 when absent)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def setup(device: str) -> tuple[DistInfo, str]:
    """Initialise the default process group from torchrun's environment when ``WORLD_SIZE > 1``.

    Returns:
        The process's :class:`DistInfo` and its device (``cuda:<LOCAL_RANK>`` on GPUs).

    Raises:
        RunError: The environment is incomplete (started without torchrun).
    """
    import torch.distributed as dist

    world = env_world_size()
    if world <= 1:
        return DistInfo(), device
    missing = [k for k in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise RunError(f"WORLD_SIZE={world} but {', '.join(missing)} is not set",
                       where="environment",
                       fix="start distributed runs with torchrun --nproc-per-node=N -m dmlplug run RECIPE")
    info = DistInfo(int(os.environ["RANK"]), world, int(os.environ["LOCAL_RANK"]))
    if device.startswith("cuda"):
        torch.cuda.set_device(info.local_rank)
        device = f"cuda:{info.local_rank}"
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo", init_method="env://")
    return info, device


def current() -> DistInfo:
    """The :class:`DistInfo` of an initialised process group (single-process otherwise)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return DistInfo()
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def teardown() -> None:
    """Destroy the default process group if this module created one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank (identity without a process group)."""
    import torch.distributed as dist

    if not current().enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def any_rank(flag: bool) -> bool:
    """True when ``flag`` is True on at least one rank (so every rank takes the same branch)."""
    import torch.distributed as dist

    if not current().enabled:
        return flag
    value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=_comm_device())
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def _comm_device() -> torch.device:
    """Where tensors for collectives must live: the current GPU with NCCL, else the CPU."""
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def barrier() -> None:
    """Wait for every rank (no-op without a process group)."""
    import torch.distributed as dist

    if current().enabled:
        dist.barrier()


# ----------------------------------------------------------------------------------------------
# Gathering with gradients


class _GatherWithGrad(torch.autograd.Function):
    """All-gather along dim 0; the backward pass returns the gradient of this rank's own slice.

    Every rank computes the same loss on the gathered tensor, so the gradient it receives for its own
    slice is already the full derivative; nothing has to be reduced here.
    """

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:  # noqa: D102
        import torch.distributed as dist

        info = current()
        ctx.rank, ctx.size = info.rank, tensor.shape[0]
        tensor = tensor.contiguous()
        parts = [torch.empty_like(tensor) for _ in range(info.world_size)]
        dist.all_gather(parts, tensor)
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return grad[ctx.rank * ctx.size:(ctx.rank + 1) * ctx.size]


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` from every rank (rank order) along dim 0, differentiable for the own slice."""
    if not current().enabled:
        return tensor
    return _GatherWithGrad.apply(tensor)


def gather_plain(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate a tensor without gradient (labels, indices) from every rank along dim 0."""
    import torch.distributed as dist

    if not current().enabled:
        return tensor
    tensor = tensor.contiguous()
    parts = [torch.empty_like(tensor) for _ in range(current().world_size)]
    dist.all_gather(parts, tensor)
    return torch.cat(parts, dim=0)


class OutputGatherer:
    """Forward hook that gathers a model's outputs across ranks while :attr:`active` is True.

    Registered on the trained model (and on the EMA copy) so that every forward pass inside a training
    step, including passes made by components on extra views, returns the global batch.
    """

    def __init__(self) -> None:
        self.active = False
        self._handles: list[Any] = []

    def attach(self, module: torch.nn.Module) -> None:
        """Gather ``module``'s outputs while active."""
        self._handles.append(module.register_forward_hook(self._hook))

    def detach(self) -> None:
        """Remove every hook."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _hook(self, module: Any, inputs: Any, output: Any) -> Any:
        if not self.active:
            return None
        return gather_output(output)


def gather_output(output: Any) -> Any:
    """Gather a model output (tensor, :class:`~dmlplug.engine.model.ModelOutput`, dict, tuple) along dim 0."""
    from dataclasses import fields, is_dataclass, replace

    if isinstance(output, torch.Tensor):
        return gather_with_grad(output) if output.dim() > 0 else output
    if is_dataclass(output) and not isinstance(output, type):
        return replace(output, **{f.name: gather_output(getattr(output, f.name)) for f in fields(output)})
    if isinstance(output, dict):
        return {k: gather_output(v) for k, v in output.items()}
    if isinstance(output, list | tuple):
        return type(output)(gather_output(v) for v in output)
    return output


# ----------------------------------------------------------------------------------------------
# Gradients and parameters


def _reduce(tensors: list[torch.Tensor], average: bool) -> None:
    """All-reduce (sum or mean) a list of tensors in place, flattened per dtype/device to few calls."""
    import torch.distributed as dist
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    buckets: dict[tuple[Any, Any], list[torch.Tensor]] = {}
    for t in tensors:
        buckets.setdefault((t.dtype, t.device), []).append(t)
    world = current().world_size
    for bucket in buckets.values():
        flat = _flatten_dense_tensors(bucket)
        dist.all_reduce(flat)
        if average:
            flat /= world
        for t, synced in zip(bucket, _unflatten_dense_tensors(flat, bucket), strict=True):
            t.copy_(synced)


def reduce_gradients(params: list[torch.nn.Parameter], average: bool) -> None:
    """Reduce the gradients of the trainable ``params``; a missing gradient takes part as zeros.

    Zeros keep the collective calls identical on every rank when a parameter got no gradient on one.
    """
    params = [p for p in params if p.requires_grad]
    grads = []
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    if params:
        _reduce(grads, average)


def sum_gradients(model_params: list[torch.nn.Parameter], other_params: list[torch.nn.Parameter]) -> None:
    """Sum the model's gradients over ranks; average those of every other trained parameter.

    The reduction without DDP: one flattened all-reduce per dtype after backward (kept as the reference the
    DDP path is tested and benchmarked against, ``benchmarks/ddp_speed.py``). A parameter without a gradient
    on this rank takes part with zeros, so every rank issues the same collective calls.
    """
    if not current().enabled:
        return
    model_ids = {id(p) for p in model_params}
    reduce_gradients(model_params, average=False)
    average_gradients([p for p in other_params if id(p) not in model_ids])


def average_gradients(params: list[torch.nn.Parameter]) -> None:
    """Average the gradients of trained parameters outside the model (loss proxies, regularizer weights).

    Every rank computed them from the same gathered batch, so they are equal up to rounding; averaging
    makes them bit-identical, so the ranks' optimizers never drift apart.
    """
    if current().enabled:
        reduce_gradients(params, average=True)


def broadcast_module(module: Any, buffers_only: bool = False) -> None:
    """Copy rank 0's parameters (unless ``buffers_only``) and buffers of ``module`` to every rank."""
    import torch.distributed as dist

    if not current().enabled or not isinstance(module, torch.nn.Module):
        return
    tensors = list(module.buffers()) if buffers_only else [*module.parameters(), *module.buffers()]
    with torch.no_grad():
        for t in tensors:
            dist.broadcast(t.data, src=0)


# ----------------------------------------------------------------------------------------------
# Sharded evaluation


def shard_bounds(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """Contiguous block ``[start, end)`` of ``n`` items for ``rank``; blocks cover ``0..n`` exactly once."""
    per = math.ceil(n / world_size) if world_size else n
    start = min(n, rank * per)
    return start, min(n, start + per)


def embed_dataset(model: Any, dataset: Any, *, batch_size: int, workers: int, device: str,
                  autocast: Any = None) -> tuple[torch.Tensor, np.ndarray]:
    """Embed ``dataset`` (items ``(image, label, index)``), sharded over ranks when distributed.

    Returns:
        float32 ``N×D`` embeddings as a tensor on ``device`` (never copied to the CPU for a GPU run) and
        int64 labels as numpy, in dataset order, identical on every rank.
    """
    from torch.utils.data import Subset

    from dmlplug.engine.data import embed_loader, eval_loader

    info = current()
    if not info.enabled:
        loader = eval_loader(dataset, batch_size=batch_size, workers=workers, device=device)
        return embed_loader(model, loader, device, autocast)
    n = len(dataset)
    start, end = shard_bounds(n, info.rank, info.world_size)
    per = math.ceil(n / info.world_size)
    if end > start:
        loader = eval_loader(Subset(dataset, range(start, end)), batch_size=batch_size, workers=workers,
                             device=device)
        emb, lab = embed_loader(model, loader, device, autocast)
    else:
        emb, lab = torch.zeros((0, 0), device=device), np.zeros(0, np.int64)
    dim = broadcast_object(emb.shape[1] if info.is_main else None)
    emb = emb.reshape(len(lab), dim)
    # Equal-sized pieces for all_gather: pad to ``per`` rows, remember the real count.
    comm_device = _comm_device()
    padded = torch.zeros(per, dim + 2, dtype=torch.float64, device=comm_device)
    padded[: len(lab), :dim] = emb.to(comm_device, torch.float64)
    padded[: len(lab), dim] = torch.from_numpy(lab).to(comm_device, torch.float64)
    padded[: len(lab), dim + 1] = 1.0
    full = gather_plain(padded)  # stays on the communication device (the GPU under NCCL)
    keep = full[:, dim + 1] == 1.0
    full = full[keep]
    if len(full) != n:  # pragma: no cover - a bug guard: shards must cover the split exactly once
        raise RunError(f"sharded evaluation gathered {len(full)} embeddings for {n} images")
    labels = full[:, dim].cpu().long().numpy().astype(np.int64)  # small: N labels
    return full[:, :dim].to(device=device, dtype=torch.float32), labels
