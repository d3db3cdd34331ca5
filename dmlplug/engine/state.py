"""Checkpoints of a run: what is saved, how it is restored, ``last.pt`` and ``best.pt``.

A checkpoint holds everything needed to continue the run at the exact batch where it was written
(docs/resume.md): weights and state of every trained component, optimizer, schedule, scaler, EMA copy,
best-metric tracker, position in the epoch and every random-number generator.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from dmlplug.checkpoints import rng_state, save_checkpoint, set_rng_state
from dmlplug.engine import distributed
from dmlplug.engine import resume as _resume
from dmlplug.errors import RunError

#: Version of the checkpoint layout written by :func:`capture`. 3: tensors and plain values only (numpy's generator
#: state as a list), sealed with its sha256 (dmlplug.checkpoints); 2 still loads (docs/resume.md).
FORMAT = 3


def _state_of(module: Any) -> Any:
    return module.state_dict() if isinstance(module, torch.nn.Module) else None


def capture(run: Any) -> dict[str, Any]:
    """Everything needed to continue ``run`` (a :class:`~dmlplug.engine.run.Run`)."""
    c, training = run.components, run.training
    generator = training.loader.generator
    if not run.epoch_complete:  # mid-epoch: the loader restarts the epoch, from its start state
        generator_state = run.epoch_generator_state
    else:
        generator_state = generator.get_state() if generator is not None else None
    return {
        "format": FORMAT,
        "epoch": run.epoch,
        "step": run.step,
        "epoch_step": run.epoch_step,
        "epoch_complete": run.epoch_complete,
        "world_size": run.dist.world_size,
        "initial_metrics": run.initial_metrics,
        "last_metrics": run.last_metrics,
        "knn_backend": run.knn_backend,
        "loader_generator": generator_state,
        "model": c.model.state_dict(),
        "loss": _state_of(c.loss),
        "miner": _state_of(c.miner),
        "regularizers": {reg.name: reg.module.state_dict() for reg in c.regularizers
                         if isinstance(reg.module, torch.nn.Module)},
        "optimizer": training.optimizer.state_dict(),
        "scheduler": training.scheduler.state_dict(),
        "scaler": training.scaler.state_dict(),
        "ema": c.ema_model.state_dict() if c.ema_model is not None else None,
        "best": run.best.state(),
        "rng": rng_state(),
        "recipe": run.recipe.dumps(),
    }


def restore(run: Any, state: dict[str, Any]) -> None:
    """Load a checkpoint written by :func:`capture` into a built run; training continues where it was written.

    Raises:
        RunError: The checkpoint does not fit the built components (a forced recipe change).
    """
    c, training = run.components, run.training
    try:
        c.model.load_state_dict(state["model"])
        for key, module in (("loss", c.loss), ("miner", c.miner)):
            if isinstance(module, torch.nn.Module) and state.get(key) is not None:
                module.load_state_dict(state[key])
        saved_regs = state.get("regularizers") or {}
        for reg in c.regularizers:
            if isinstance(reg.module, torch.nn.Module) and reg.name in saved_regs:
                reg.module.load_state_dict(saved_regs[reg.name])
        if c.ema_model is not None and state.get("ema") is not None:
            c.ema_model.load_state_dict(state["ema"])
        training.optimizer.load_state_dict(state["optimizer"])
        if state.get("scheduler") is not None:  # None: written without a schedule object (no schedule)
            training.scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler"):
            training.scaler.load_state_dict(state["scaler"])
    except (RuntimeError, KeyError, ValueError) as exc:
        raise RunError(f"the checkpoint does not fit the recipe: {type(exc).__name__}: {exc}",
                       where=str(run.checkpoint_dir / _resume.LAST),
                       fix="resume with the recipe the run was started with (drop --force and the changes)",
                       ) from exc
    run.best.load(state.get("best"))
    run.epoch, run.step = int(state["epoch"]), int(state["step"])
    run.epoch_step = int(state.get("epoch_step", 0))
    run.epoch_complete = bool(state.get("epoch_complete", True))
    run.initial_metrics = dict(state.get("initial_metrics") or {})
    run.last_metrics = dict(state.get("last_metrics") or {})
    run.knn_backend = state.get("knn_backend")
    generator = training.loader.generator
    if generator is not None and state.get("loader_generator") is not None:
        generator.set_state(state["loader_generator"])
    set_rng_state(state["rng"])
    run.resumed = True


def save(run: Any, name: str) -> Path:
    """Write ``checkpoints/<name>.pt`` atomically and call ``on_checkpoint`` (rank 0 only writes).

    The loss terms of the steps since the last check are checked first: a checkpoint never holds weights
    trained on a non-finite loss.

    Raises:
        RunError: A loss term since the last check was not finite (nothing is written).
    """
    run.loss_log.check()
    path = run.checkpoint_dir / f"{name}.pt"
    if run.dist.is_main:
        save_checkpoint(path, capture(run))
        run.host.pm.hook.on_checkpoint(run=run.view, path=path)
    return path


def checkpoint(run: Any, improved: bool) -> None:
    """Save ``last.pt``; when the selection metric improved, ``best.pt`` becomes a copy of it (atomically).

    Collective in a distributed run (BatchNorm buffers come from rank 0); only rank 0 writes.
    """
    distributed.broadcast_module(run.components.model, buffers_only=True)
    last = save(run, "last")
    if not (improved and run.dist.is_main):
        return
    folder = run.checkpoint_dir
    tmp = folder / ".best.pt.tmp"
    try:
        shutil.copyfile(last, tmp)
        tmp.replace(folder / "best.pt")
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise RunError(f"could not write {folder / 'best.pt'}: {exc.strerror or exc}", where=str(folder),
                       fix="free disk space; last.pt and the previous best.pt are intact") from exc
