"""Checkpoints, written atomically (write to a temporary file, then rename)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dmlplug.engine.atomic import atomic_write


def rng_state() -> dict[str, Any]:
    """States of python, numpy and torch (CPU and CUDA) random number generators."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def save_checkpoint(path: Path, state: dict[str, Any]) -> Path:
    """Save ``state`` with torch.save, atomically: a failure never corrupts an existing file."""
    return atomic_write(Path(path), lambda handle: torch.save(state, handle))


def load_checkpoint(path: Path, map_location: str = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint`."""
    return torch.load(Path(path), map_location=map_location, weights_only=False)
