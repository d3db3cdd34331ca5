"""Batch samplers over integer training labels (numpy only).

Every sampler yields ``len(self)`` full batches of ``batch_size`` dataset indices per epoch, and the
batches of an epoch depend on ``(seed, epoch)`` alone (:meth:`EpochBatchSampler.set_epoch`), so a run
resumed at any epoch sees exactly the batches an uninterrupted run would have seen. The position inside an
epoch is the number of batches already trained: the engine skips that many on resume and cuts every global
batch into equal per-rank slices under torchrun.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


class EpochBatchSampler:
    """Base class: reproducible full batches, ``batches_per_epoch`` of them per epoch.

    Args:
        labels: int64 labels of the training set (one per sample).
        batch_size: Indices per batch.
        seed: Run seed.
        batches_per_epoch: Batches per epoch; ``None`` means ``⌊N / batch_size⌋`` (at least 1).
    """

    def __init__(self, labels: np.ndarray, batch_size: int, seed: int = 0, batches_per_epoch: int | None = None):
        self.labels = np.asarray(labels, dtype=np.int64)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.batches_per_epoch = batches_per_epoch or max(1, len(self.labels) // self.batch_size)
        self.epoch = 0
        self.classes, self.class_members = _members(self.labels)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose batches the next iteration yields."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.batches_per_epoch

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        for _, batch in zip(range(self.batches_per_epoch), self.batches(rng), strict=False):
            yield [int(i) for i in batch]

    def batches(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        """Yield batches forever (the base iterator stops after ``batches_per_epoch``)."""
        raise NotImplementedError


class RandomBatchSampler(EpochBatchSampler):
    """Uniformly shuffled samples; each pass over the data is a new permutation cut into full batches."""

    def batches(self, rng: np.random.Generator) -> Iterator[np.ndarray]:  # noqa: D102
        pending = np.empty(0, dtype=np.int64)
        while True:
            while len(pending) < self.batch_size:
                pending = np.concatenate([pending, rng.permutation(len(self.labels))])
            yield pending[: self.batch_size]
            pending = pending[self.batch_size:]


class MPerClassSampler(EpochBatchSampler):
    """``batch_size / m`` distinct classes per batch, ``m`` samples each (pytorch-metric-learning semantics).

    Classes are taken in turn from a shuffled cycle so all are visited equally often; a class's samples
    are drawn without replacement, or with replacement when it has fewer than ``m``.
    """

    def __init__(self, labels: np.ndarray, batch_size: int, m: int, **kwargs):
        super().__init__(labels, batch_size, **kwargs)
        self.m = int(m)
        self.classes_per_batch = self.batch_size // self.m

    def batches(self, rng: np.random.Generator) -> Iterator[np.ndarray]:  # noqa: D102
        queue: list[int] = []
        while True:
            chosen = queue[: self.classes_per_batch]
            queue = queue[self.classes_per_batch:]
            if len(chosen) < self.classes_per_batch:
                # A new cycle, without the classes already in this batch so they stay distinct.
                cycle = [int(c) for c in rng.permutation(len(self.classes)) if c not in chosen]
                missing = self.classes_per_batch - len(chosen)
                chosen, queue = chosen + cycle[:missing], cycle[missing:]
            yield np.concatenate([_draw(rng, self.class_members[c], self.m) for c in chosen])


class ClassRandomSampler(EpochBatchSampler):
    """SPC-k (Revisiting-DML ``class_random``, docs/methods/revisiting.md).

    Every batch repeats ``batch_size / k`` times: draw a class uniformly with replacement, then ``k`` of
    its samples uniformly with replacement (duplicate classes and samples are possible).
    """

    def __init__(self, labels: np.ndarray, batch_size: int, k: int, **kwargs):
        super().__init__(labels, batch_size, **kwargs)
        self.k = int(k)

    def batches(self, rng: np.random.Generator) -> Iterator[np.ndarray]:  # noqa: D102
        while True:
            classes = rng.integers(0, len(self.classes), size=self.batch_size // self.k)
            yield np.concatenate([
                members[rng.integers(0, len(members), size=self.k)]
                for members in (self.class_members[c] for c in classes)
            ])


class ClassBalancedSampler(EpochBatchSampler):
    """Samples drawn without replacement within a batch, with probability ∝ 1 / (size of their class).

    Every class carries the same total probability, so rare and frequent classes appear equally often
    in expectation, without a fixed number of samples per class.
    """

    def __init__(self, labels: np.ndarray, batch_size: int, **kwargs):
        super().__init__(labels, batch_size, **kwargs)
        counts = np.bincount(self.labels)
        weights = 1.0 / counts[self.labels]
        self.probabilities = weights / weights.sum()

    def batches(self, rng: np.random.Generator) -> Iterator[np.ndarray]:  # noqa: D102
        while True:
            yield rng.choice(len(self.labels), size=self.batch_size, replace=False, p=self.probabilities)


class HierarchicalSampler(EpochBatchSampler):
    """Batches from a few super-classes (pytorch-metric-learning ``HierarchicalSampler`` idea).

    Each batch takes ``super_classes_per_batch`` distinct super-classes; each fills
    ``batch_size / super_classes_per_batch`` slots with groups of ``m`` samples of its classes (distinct
    classes while the super-class has enough, then repeated).

    Args:
        super_labels: Super-class of every sample (e.g. SOP's 12 product categories).
        m: Samples per class.
        super_classes_per_batch: Super-classes per batch.
    """

    def __init__(self, labels: np.ndarray, batch_size: int, super_labels: np.ndarray, m: int,
                 super_classes_per_batch: int, **kwargs):
        super().__init__(labels, batch_size, **kwargs)
        self.m = int(m)
        self.super_classes_per_batch = int(super_classes_per_batch)
        super_labels = np.asarray(super_labels, dtype=np.int64)
        class_super: dict[int, int] = {}
        for label, sup in zip(self.labels, super_labels, strict=True):
            class_super.setdefault(int(label), int(sup))
        self.supers = sorted(set(class_super.values()))
        self.super_classes = {s: [i for i, c in enumerate(self.classes) if class_super[int(c)] == s]
                              for s in self.supers}

    def batches(self, rng: np.random.Generator) -> Iterator[np.ndarray]:  # noqa: D102
        groups = self.batch_size // self.super_classes_per_batch // self.m
        while True:
            parts: list[np.ndarray] = []
            for s in rng.choice(self.supers, size=self.super_classes_per_batch, replace=False):
                classes = self.super_classes[int(s)]
                picked = rng.choice(len(classes), size=groups, replace=groups > len(classes))
                parts.extend(_draw(rng, self.class_members[classes[i]], self.m) for i in picked)
            yield np.concatenate(parts)


def _members(labels: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    classes, inverse = np.unique(labels, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    splits = np.cumsum(np.bincount(inverse, minlength=len(classes)))[:-1]
    return classes, np.split(order, splits)


def _draw(rng: np.random.Generator, members: np.ndarray, count: int) -> np.ndarray:
    """``count`` members, without replacement when there are enough."""
    return members[rng.choice(len(members), size=count, replace=len(members) < count)]
