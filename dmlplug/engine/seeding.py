"""Seeding of every random number generator a run touches."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

import numpy as np


def seed_everything(seed: int) -> None:
    """Seed python's ``random``, numpy's global RNG and torch (CPU and CUDA)."""
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def worker_init(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: derive python and numpy seeds from torch's per-worker seed."""
    import torch

    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)


def configure_determinism(strict: bool) -> Callable[[], None]:
    """Opt-in strict determinism (``[run] deterministic``): deterministic kernels only, no cuDNN autotuning.

    CPU training is deterministic without it; on GPU it makes repeated runs bit-identical at some speed
    cost. Operations without a deterministic implementation then raise an error naming them.

    Returns:
        A function restoring the previous settings (the run calls it when it ends).
    """
    import torch

    if not strict:
        return lambda: None
    previous = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
                torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    # cuBLAS needs a fixed workspace for reproducible GEMMs (must be set before the first cuBLAS call).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False

    def restore() -> None:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = previous[2], previous[3]

    return restore


def sample_seed(seed: int, epoch: int, position: int) -> int:
    """Seed of the augmentation of the ``position``-th sample of ``epoch`` (a 63-bit integer).

    It depends on the global position in the epoch only, not on the process or worker that loads the
    sample, so augmentations are the same with any number of workers or ranks, and after a resume.
    """
    sequence = np.random.SeedSequence([int(seed), int(epoch), int(position)])
    return int(sequence.generate_state(2, dtype=np.uint32).astype(np.uint64) @ np.array([1 << 31, 1],
                                                                                       dtype=np.uint64))


class SeededIndex(int):
    """A dataset index that carries the seed its sample's augmentation must use."""

    seed: int

    def __new__(cls, index: int, seed: int = 0) -> SeededIndex:  # noqa: D102
        value = super().__new__(cls, index)
        value.seed = int(seed)
        return value


class SeededDataset:
    """Wraps a map-style dataset: every :class:`SeededIndex` is loaded under its own RNG seed.

    The global python, numpy and torch generators are seeded for the item and restored afterwards, so the
    main process's random streams are not disturbed when loading without workers.
    """

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __getitem__(self, index: Any) -> Any:
        seed = getattr(index, "seed", None)
        if seed is None:
            return self.dataset[index]
        import torch

        saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
        try:
            random.seed(seed)
            np.random.seed(seed % 2**32)
            torch.manual_seed(seed)
            return self.dataset[int(index)]
        finally:
            random.setstate(saved[0])
            np.random.set_state(saved[1])
            torch.set_rng_state(saved[2])
