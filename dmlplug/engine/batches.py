"""The batches of an epoch as one rank trains them: rank slices, batches skipped after a resume, sample seeds.

:class:`BatchPlan` wraps the recipe's batch sampler. The sampler contract (full batches that depend on
``(seed, epoch)`` only) is what makes both exact resume (skip the batches already trained without loading
anything) and data-parallel training (every rank cuts the same global batch) possible; see docs/resume.md and
docs/distributed.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dmlplug.engine.seeding import SeededIndex, sample_seeds
from dmlplug.errors import RunError
from dmlplug.protocols import HasSetEpoch


class BatchPlan:
    """Wraps an epoch batch sampler: rank slicing and skipping of batches already consumed.

    The wrapped sampler must follow the sampler contract (full batches that depend on ``(seed, epoch)``
    only); then ``skip`` batches can be dropped without loading any image and the remaining ones are the
    ones an uninterrupted run would see.

    Args:
        sampler: The recipe's batch sampler.
        rank: This process's rank.
        world_size: Number of processes; every batch is cut into ``world_size`` equal slices.
        seed: When given, indices are yielded as :class:`~dmlplug.engine.seeding.SeededIndex` carrying the
            augmentation seed of their global position in the epoch (see :class:`SeededDataset`).
    """

    def __init__(self, sampler: Any, rank: int = 0, world_size: int = 1, seed: int | None = None):
        self.sampler = sampler
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.seed = seed
        self.epoch = 0
        self.skip = 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """Select the epoch and how many of its batches were consumed already."""
        if isinstance(self.sampler, HasSetEpoch):
            self.sampler.set_epoch(epoch)
        self.epoch = int(epoch)
        self.skip = int(skip)

    def __len__(self) -> int:
        return max(0, len(self.sampler) - self.skip)

    def __iter__(self) -> Iterator[list[int]]:
        offset = 0
        for position, batch in enumerate(self.sampler):
            batch = list(batch)
            start, offset = offset, offset + len(batch)
            if position < self.skip:
                continue
            if self.seed is not None:
                seeds = sample_seeds(self.seed, self.epoch, start, len(batch))
                batch = [SeededIndex(int(i), seed) for i, seed in zip(batch, seeds, strict=True)]
            if self.world_size > 1:
                if len(batch) % self.world_size:
                    raise RunError(
                        f"a batch of {len(batch)} samples cannot be split equally over {self.world_size} processes",
                        where="data.batch_size / the sampler",
                        fix="use a batch size divisible by the number of processes")
                size = len(batch) // self.world_size
                batch = batch[self.rank * size:(self.rank + 1) * size]
            yield batch


def check_batch_size(batch_size: int, world_size: int) -> None:
    """Refuse a global batch size that cannot be split equally over the ranks.

    Raises:
        RunError: ``batch_size`` is not a multiple of ``world_size``.
    """
    if world_size > 1 and batch_size % world_size:
        raise RunError(f"data.batch_size = {batch_size} is not divisible by the {world_size} processes",
                       where="[data] batch_size",
                       fix=f"data.batch_size is the global batch: use a multiple of {world_size}")
