"""Seeding of every random number generator a run touches, and the per-sample augmentation seeds.

Per-sample augmentation (see docs/resume.md, "Reproducible augmentation"): every training sample is
transformed under a seed that is a pure function of ``(run seed, epoch, global position in the epoch)``, so
resume, loader workers and ranks give bit-identical augmentations. The choices below were made by measuring
each piece with ``timeit`` (``benchmarks/seeding_cost.py`` measures the whole; 2-core CPU, torch 2.14 CUDA
build, medians):

- the seed is a splitmix64 hash of the three integers (~1.5 µs in python), not a numpy ``SeedSequence``
  (~19 µs);
- only ``torch.default_generator`` is seeded (~1.3 µs): ``torch.manual_seed`` also seeds every CUDA device
  (and queues that seeding when CUDA is not initialised yet) and took ~190 µs; dataset transforms run on the
  CPU, so the CUDA generators are neither seeded nor disturbed;
- python's ``random`` and numpy's global ``RandomState`` are seeded per sample too, so third-party transforms
  that draw from them stay reproducible, unless the augmentation policy declares the generators it draws
  from (:class:`~dmlplug.protocols.HasRandomSources`; the built-ins: torch only). Measured in the loading of a
  glyph batch (64 images, thread CPU time): seeding all three cost ~1.25 ms per batch (~20 µs per image, the
  first draws after a reseed included), torch alone ~0.4 ms;
- the seeds of a batch are computed together, with numpy's wrapping uint64 arithmetic;
- the global states are saved before a batch and restored after it (:meth:`SeededDataset.__getitems__`,
  which the DataLoader calls once per batch), not around every image: saving and restoring numpy's
  state alone costs ~90 µs.
"""

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


_MASK64 = (1 << 64) - 1
_GOLDEN_GAMMA = 0x9E3779B97F4A7C15


def splitmix64(value: int) -> int:
    """The splitmix64 output for state ``value`` (Steele, Lea & Flood 2014; Vigna's reference constants).

    A bijective, well-mixed 64-bit integer hash: ``splitmix64(0) == 0xE220A8397B1DCDAF``, the first output of
    the reference generator seeded with 0.
    """
    z = (int(value) + _GOLDEN_GAMMA) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def sample_seed(seed: int, epoch: int, position: int) -> int:
    """Seed of the augmentation of the ``position``-th sample of ``epoch`` (a 63-bit integer).

    It depends on the global position in the epoch only, not on the process or worker that loads the
    sample, so augmentations are the same with any number of workers or ranks, and after a resume. Each
    argument is folded into a splitmix64 chain, so neighbouring positions and epochs get unrelated seeds.
    """
    return sample_seeds(seed, epoch, int(position), 1)[0]


def sample_seeds(seed: int, epoch: int, start: int, count: int) -> list[int]:
    """:func:`sample_seed` of the positions ``start .. start + count - 1`` of ``epoch``, computed together.

    The same chain as :func:`splitmix64`, in numpy's uint64 arithmetic (which wraps modulo 2**64 as the
    masks in :func:`splitmix64` do): one batch's seeds cost a few numpy operations instead of a python hash
    per sample.
    """
    prefix = splitmix64(splitmix64(int(seed) & _MASK64) ^ (int(epoch) & _MASK64))
    positions = np.arange(int(start), int(start) + int(count), dtype=np.uint64)
    z = np.bitwise_xor(np.uint64(prefix), positions) + np.uint64(_GOLDEN_GAMMA)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return ((z ^ (z >> np.uint64(31))) >> np.uint64(1)).tolist()


class SeededIndex(int):
    """A dataset index that carries the seed its sample's augmentation must use."""

    seed: int

    def __new__(cls, index: int, seed: int = 0) -> SeededIndex:  # noqa: D102
        value = super().__new__(cls, index)
        value.seed = int(seed)
        return value


#: The global generators a transform may draw from, as :class:`~dmlplug.protocols.HasRandomSources` names them.
RANDOM_SOURCES = frozenset({"torch", "python", "numpy"})


def seed_sample(seed: int, sources: frozenset[str] = RANDOM_SOURCES) -> None:
    """Seed the generators of ``sources`` a CPU transform may draw from (default: torch's CPU one, python, numpy)."""
    import torch

    if "torch" in sources:
        torch.default_generator.manual_seed(seed)
    if "python" in sources:
        random.seed(seed)
    if "numpy" in sources:
        np.random.seed(seed & 0xFFFFFFFF)


def _save_states(sources: frozenset[str]) -> dict[str, Any]:
    """The current states of the global generators of ``sources``."""
    import torch

    savers: dict[str, Callable[[], Any]] = {"torch": torch.default_generator.get_state, "python": random.getstate,
              "numpy": lambda: np.random.get_state(legacy=False)}
    return {name: save() for name, save in savers.items() if name in sources}


def _restore_states(states: dict[str, Any]) -> None:
    """Put back what :func:`_save_states` saved."""
    import torch

    restorers: dict[str, Callable[[Any], Any]] = {"torch": torch.default_generator.set_state,
                                                  "python": random.setstate, "numpy": np.random.set_state}
    for name, value in states.items():
        restorers[name](value)


class SeededDataset:
    """Wraps a map-style dataset: every :class:`SeededIndex` is loaded under its own RNG seed.

    Before each sample, the global generators of ``sources`` (default: torch's default CPU generator, python's
    ``random`` and numpy's global generator) are seeded with the index's seed (:func:`seed_sample`); a
    transform drawing from them is therefore a pure function of the seed. Their previous states are restored
    after the batch (or the single item), so the main process's random streams are not disturbed when loading
    without workers. CUDA generators are not touched: transforms that draw random numbers on a GPU are not
    reproducible per sample.

    Args:
        dataset: The map-style dataset.
        sources: The generators the dataset's transform draws from (the policy's ``random_sources``).
    """

    def __init__(self, dataset: Any, sources: frozenset[str] = RANDOM_SOURCES):
        unknown = set(sources) - RANDOM_SOURCES
        if unknown:
            raise ValueError(f"unknown random sources {sorted(unknown)}; known: {sorted(RANDOM_SOURCES)}")
        self.dataset = dataset
        self.sources = frozenset(sources)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __getitem__(self, index: Any) -> Any:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: list[Any]) -> list[Any]:
        """Load a batch (the DataLoader's fetcher calls this once per batch): one save/restore per batch."""
        if all(getattr(index, "seed", None) is None for index in indices):
            return [self.dataset[index] for index in indices]
        saved = _save_states(self.sources)
        try:
            items = []
            for index in indices:
                seed = getattr(index, "seed", None)
                if seed is None:
                    items.append(self.dataset[index])
                    continue
                seed_sample(seed, self.sources)
                items.append(self.dataset[int(index)])
            return items
        finally:
            _restore_states(saved)
