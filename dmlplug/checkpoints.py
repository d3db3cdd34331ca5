"""Checkpoints, written atomically (write to a temporary file, then rename)."""

from __future__ import annotations

import errno
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dmlplug.errors import RunError
from dmlplug.files import atomic_write


def rng_state() -> dict[str, Any]:
    """States of python, numpy and torch (CPU and CUDA) random number generators."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    # torch.cuda.is_initialized has no annotations in torch.
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore generators saved by :func:`rng_state` (CUDA states only when the device count matches)."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"].cpu() if hasattr(state["torch"], "cpu") else state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])


def save_checkpoint(path: Path, state: dict[str, Any]) -> Path:
    """Save ``state`` with torch.save, atomically: a failure never corrupts an existing file.

    Raises:
        RunError: The file could not be written (full disk, permissions); the previous checkpoint at
            ``path`` is left as it was.
    """
    try:
        return atomic_write(Path(path), lambda handle: torch.save(state, handle))
    except OSError as exc:
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        raise RunError(
            f"could not write checkpoint {path}: {'disk full' if full else exc.strerror or exc}",
            where=str(Path(path).parent),
            fix=("free disk space" if full else "check the run directory's permissions")
            + "; the previous checkpoint in this folder is intact and `dmlplug run RUN_DIR --resume` continues "
              "from it",
        ) from exc
    except RuntimeError as exc:  # torch wraps write failures of its zip writer in RuntimeError
        raise RunError(f"could not write checkpoint {path}: {exc}", where=str(Path(path).parent),
                       fix="free disk space; the previous checkpoint in this folder is intact") from exc


def load_checkpoint(path: Path, map_location: str = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint`.

    Raises:
        RunError: The file is missing or unreadable.
    """
    try:
        checkpoint: dict[str, Any] = torch.load(Path(path), map_location=map_location, weights_only=False)
        return checkpoint
    except (OSError, RuntimeError, EOFError) as exc:
        raise RunError(f"cannot read checkpoint {path}: {exc}", where=str(path),
                       fix="use another checkpoint (best.pt) or start a new run") from exc
