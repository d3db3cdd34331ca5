"""``DistributedDataParallel`` for the training forward pass, with gradients summed over ranks.

Every rank's loss covers the global batch (model outputs are gathered with
:func:`~dmlplug.engine.distributed.gather_with_grad`), so each rank's backward pass gives the part of the
gradient that flows through its own slice; the parts are *summed* by DDP's bucketed all-reduce, which
overlaps the backward pass. See docs/distributed.md, and ``benchmarks/ddp_speed.py`` for the comparison
with one flattened all-reduce after backward (:func:`~dmlplug.engine.distributed.sum_gradients`).

Components that call the model themselves (extra views, ``StepOutput.model``) call the plain model: their
outputs are gathered by the same forward hook, and the gradients they produce reach the same parameters, so
DDP reduces them with the rest (one gradient per parameter reaches DDP's hook, however many passes used it).
Parameters that get no gradient (an unused head of a multi head) are found in a first step without DDP and
left out of it (:class:`DataParallelModel`). Parameters outside the model (loss proxies, regularizer
weights) are reduced by :func:`~dmlplug.engine.distributed.average_gradients`.
"""

from __future__ import annotations

from typing import Any

import torch


def sum_hook(state, bucket):  # unannotated: DDP checks the annotations against its own types
    """DDP communication hook: all-reduce a gradient bucket (``dist.GradBucket``) as a **sum**.

    DDP's own hook divides by the world size, right when each rank's loss covers its own samples only. Here
    every rank's loss covers the global batch and its gradient is the part that flows through its own slice
    (:class:`_GatherWithGrad`), so the parts must be added: summing in the hook does that without rescaling
    the loss, which would also rescale the gradients of parameters outside DDP (proxies).
    """
    import torch.distributed as dist

    work = dist.all_reduce(bucket.buffer(), group=state, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


class DataParallelModel:
    """Runs the training forward pass of a model through ``DistributedDataParallel``.

    DDP fixes the parameters it reduces when it is built, and waits in every backward pass for a gradient of
    each of them. So the wrapper is (re)built lazily, whenever the model object is replaced (SyncBatchNorm
    conversion, a component swapped after the build) or the set of parameters that require gradients changes
    (the backbone's warm-up freeze): the first step after such a change runs the plain model and reduces with
    one flattened all-reduce (:meth:`reduce`), and records which parameters got a gradient; DDP is then built
    for those only. The others (an unused head of a multi head) are reduced as before, with zeros, in
    :meth:`reduce`. Building broadcasts rank 0's parameters, identical on every rank anyway.

    Args:
        device: The process's device (``cuda:<i>`` pins DDP to that GPU).
        enabled: False in a single process: the model is called as it is and nothing is reduced.
        bucket_cap_mb: DDP's gradient bucket size.
    """

    def __init__(self, device: str, *, enabled: bool = True, bucket_cap_mb: float = 25.0) -> None:
        self.device = device
        self.enabled = enabled
        self.bucket_cap_mb = bucket_cap_mb
        #: How many times DDP was built (tests: one build per change of the trained parameters).
        self.builds = 0
        self._key: Any = None
        self._ddp: Any = None
        self._probing = False
        self._unused: list[str] = []

    def __call__(self, model: torch.nn.Module, images: torch.Tensor) -> Any:
        """``model(images)``, with DDP's gradient reduction armed for the following backward pass."""
        if not self.enabled:
            return model(images)
        key = (id(model), tuple(p.requires_grad for p in model.parameters()))
        if key != self._key:
            self._key, self._ddp, self._probing = key, None, True
        if self._probing or not any(key[1]):  # DDP refuses a module without trainable parameters
            return model(images)
        if self._ddp is None:
            self._build(model)
        return self._ddp(images)

    def reduce(self, model: torch.nn.Module) -> None:
        """After backward: sum over ranks the model's gradients that DDP did not reduce.

        After a probing step that is every gradient (and the parameters that got one are recorded for the
        DDP to build); otherwise the parameters DDP leaves out, which got no gradient when probed.
        """
        from dmlplug.engine.distributed import reduce_gradients

        if not self.enabled:
            return
        named = dict(model.named_parameters())
        if self._probing:
            self._probing = False
            trained = [name for name, p in named.items() if p.requires_grad]
            used = _any_rank_flags([named[name].grad is not None for name in trained], self.device)
            self._unused = [name for name, flag in zip(trained, used, strict=True) if not flag]
            reduce_gradients([named[name] for name in trained], average=False)
        elif self._unused:
            reduce_gradients([named[name] for name in self._unused if name in named], average=False)

    def _build(self, model: torch.nn.Module) -> None:
        from torch.nn.parallel import DistributedDataParallel

        cuda = self.device.startswith("cuda")
        # No buffer broadcast before every forward (a collective per step): BatchNorm statistics are
        # broadcast from rank 0 before evaluation and checkpoints, as without DDP. torch 2.14 renamed the
        # option; ``forward_sync_buffers=False`` still syncs once when DDP is built, which changes nothing.
        # dict[str, Any]: which keyword (and so which typed parameter) depends on the torch version.
        buffers: dict[str, Any] = ({"forward_sync_buffers": False} if "forward_sync_buffers" in _ddp_options()
                                   else {"broadcast_buffers": False})
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, self._unused)
        self._ddp = DistributedDataParallel(
            model, device_ids=[torch.device(self.device).index] if cuda else None,
            bucket_cap_mb=self.bucket_cap_mb, **buffers)
        self._ddp.register_comm_hook(None, sum_hook)
        self.builds += 1


def _any_rank_flags(flags: list[bool], device: str) -> list[bool]:
    """Element-wise OR of ``flags`` over ranks (every rank then builds the same DDP)."""
    import torch.distributed as dist

    if not flags:
        return []
    value = torch.tensor(flags, dtype=torch.int32, device="cuda" if device.startswith("cuda") else "cpu")
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return [bool(v) for v in value.tolist()]


def _ddp_options() -> set[str]:
    """The keyword arguments this torch's ``DistributedDataParallel`` accepts."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    return set(inspect.signature(DistributedDataParallel.__init__).parameters)
