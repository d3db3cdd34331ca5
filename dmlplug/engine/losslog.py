"""Loss terms of the training steps, kept on the device: read back every ``run.log_every`` steps, not every step.

Reading a CUDA tensor's value on the host (``float(t)``, ``t.item()``, ``if t: ...``) waits for every kernel
queued so far; doing it every step keeps the CPU from queueing the next step while the GPU runs this one.
So each step only stacks its terms into one small device tensor (:meth:`LossLog.record`); the values are
copied to the host in one transfer by :meth:`LossLog.check`, which the epoch loop calls on logging steps,
before every checkpoint and at the end of every epoch. :meth:`~LossLog.check` also finds the first
non-finite term of the steps since the previous check and raises, naming the term and the step: as no
checkpoint is written before that check, the last checkpoint on disk is always one of finite training.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from dmlplug.engine import rundir
from dmlplug.errors import RunError


class StepLosses(Mapping):
    """The loss terms of one step (``loss``, each regularizer's, ``total``) as floats, read on first access.

    What ``on_step_end`` receives. On a logging step (``step % run.log_every == 0``) the values are already
    on the host; reading them on any other step copies them from the device, which waits for the step's
    kernels (a host sync), so a hook that needs them every step slows a GPU run down.
    """

    def __init__(self, names: tuple[str, ...], values: torch.Tensor):
        self._names = names
        self._values = values
        self._floats: dict[str, float] | None = None

    def _resolve(self) -> dict[str, float]:
        if self._floats is None:
            self._floats = dict(zip(self._names, self._values.tolist(), strict=True))
        return self._floats

    def resolved(self, floats: list[float]) -> None:
        """Hand over the host values already read by :meth:`LossLog.check` (no second transfer)."""
        self._floats = dict(zip(self._names, floats, strict=True))

    def __getitem__(self, name: str) -> float:
        return self._resolve()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"StepLosses({self._resolve()!r})"


class LossLog:
    """The loss terms of the steps since the last :meth:`check`, on the device.

    Args:
        directory: The run directory (named in the error of a non-finite term).
    """

    def __init__(self, directory: Path):
        self.directory = directory
        #: ``(epoch, step, losses)`` of every step since the last check, in order.
        self._pending: list[tuple[int, int, StepLosses]] = []

    def record(self, terms: dict[str, Any], *, epoch: int, step: int) -> StepLosses:
        """Keep one step's terms (``total`` included) on the device: no host sync, one ``torch.stack``."""
        device = next((v.device for v in terms.values() if isinstance(v, torch.Tensor)), None)
        losses = StepLosses(tuple(terms), torch.stack([_scalar(v, device) for v in terms.values()]))
        self._pending.append((epoch, step, losses))
        return losses

    def check(self) -> None:
        """Copy the pending steps' terms to the host (one sync) and stop at the first non-finite one.

        After the check, every pending :class:`StepLosses` holds host values (the loggers read them for free).

        Raises:
            RunError: A term was not finite; it names the first such term and its step.
        """
        pending, self._pending = self._pending, []
        if not pending:
            return
        # One transfer for the whole window: every step's terms are concatenated on the device first.
        flat = torch.cat([losses._values for _, _, losses in pending]).tolist()
        at = 0
        for epoch, step, losses in pending:
            floats = flat[at:at + len(losses)]
            at += len(losses)
            losses.resolved(floats)
            for name, value in zip(losses, floats, strict=True):
                if not math.isfinite(value):
                    raise RunError(
                        f"loss term {name!r} is {value} at step {step} (epoch {epoch})",
                        where=f"run directory {self.directory}",
                        fix="lower the learning rate or the term's weight; the last good checkpoint (written "
                            f"before step {step}) is kept in {self.directory / rundir.CHECKPOINTS}",
                    )


def _scalar(value: Any, device: Any) -> torch.Tensor:
    """A term as a detached float32 0-d tensor (a plain number is copied to ``device``: no sync)."""
    if isinstance(value, torch.Tensor):
        return value.detach().float().reshape(())
    return torch.tensor(float(value), dtype=torch.float32, device=device)
