"""Exact statistics of every pair similarity in bounded memory: a chunked scan, a fine histogram, refinement.

Every unordered pair ``i < j`` of an ``N×D`` set is visited once, in row blocks sized by a memory budget, so no
``N×N`` matrix is ever held. The first pass histograms the positive (same-label) and negative pair similarities
into ``bins`` equal bins over [-1, 1]; a second pass collects the exact values that fall into chosen bin
intervals (and counts, per class, the positive pairs above each interval), so order statistics and counts at
any threshold inside an interval are exact.

**Exact similarities.** The cosine similarity of two items is the dot product of their L2-normalised
embeddings with every component rounded to a multiple of ``2**-24`` (:func:`normalize`). Products of two
such numbers are multiples of ``2**-48`` and every partial sum stays below ``2**53`` of those units, so the
float64 dot product is exact whatever order a BLAS sums it in: a block of the scan gives bit for bit the value
of a full ``X @ X.T``. The rounding moves a similarity by at most about ``√D · 2**-24`` (1e-6 for D = 512),
below the float32 noise of the model itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from dmlplug.errors import DataError

#: Components of normalised embeddings are multiples of 2**-QUANT_BITS (see the module docstring).
QUANT_BITS = 24


def normalize(embeddings: np.ndarray) -> np.ndarray:
    """L2-normalised float64 rows, each component rounded to a multiple of ``2**-24``.

    Raises:
        DataError: A row is all zeros (it has no direction, so no cosine similarity).
    """
    x = np.asarray(embeddings, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if (norms == 0).any():
        row = int(np.flatnonzero(norms[:, 0] == 0)[0])
        raise DataError(f"embedding {row} is all zeros, so it has no cosine similarity", where="calibration input",
                        fix="check the model: a zero embedding means a dead head or an empty image")
    scale = float(2**QUANT_BITS)
    return np.round(x / norms * scale) / scale


def bin_index(sims: np.ndarray, bins: int) -> np.ndarray:
    """Bin of each similarity: ``floor((s + 1) · bins / 2)`` clipped to ``[0, bins − 1]``.

    The map is monotone (rounding is), so ``s ≤ s'`` implies ``bin(s) ≤ bin(s')``: every pair above a bin
    is above every pair in it, which is what makes counts from the histogram exact.
    """
    scaled = sims + 1.0
    scaled *= bins / 2.0  # in place: a block of the scan is the largest array calibration holds
    idx = np.floor(scaled, out=scaled).astype(np.int64)
    return np.clip(idx, 0, bins - 1, out=idx)


@dataclass
class Refined:
    """Exact values of one bin interval ``[lo, hi]`` from :meth:`PairScan.refine`.

    Attributes:
        lo: First bin of the interval.
        hi: Last bin of the interval.
        pos: Similarities of the positive pairs in the interval (float64).
        pos_class: Dense class index of each of those positive pairs.
        neg: Similarities of the negative pairs in the interval (float64).
        pos_above: Per dense class, positive pairs in bins above ``hi``.
    """

    lo: int
    hi: int
    pos: np.ndarray
    pos_class: np.ndarray
    neg: np.ndarray
    pos_above: np.ndarray


class PairScan:
    """All unordered pairs of a labelled set, scanned block by block.

    Args:
        x: Output of :func:`normalize` (N×D float64).
        classes: Dense class index of every item (0..C−1).
        memory_budget_mb: Working memory of one block (about 40 bytes per pair of the block).
    """

    def __init__(self, x: np.ndarray, classes: np.ndarray, memory_budget_mb: float = 256.0):
        self.x = x
        self.classes = classes.astype(np.int64)
        self.num_classes = int(self.classes.max()) + 1 if len(self.classes) else 0
        n = len(x)
        self.rows = max(1, int(memory_budget_mb * 2**20) // (40 * max(1, n)))

    def blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(positive similarities, their classes, negative similarities)`` of each row block."""
        x, cls, n = self.x, self.classes, len(self.x)
        for r0 in range(0, n - 1, self.rows):
            r1 = min(n, r0 + self.rows)
            sims = x[r0:r1] @ x[r0:].T  # columns from r0 on: the pairs (i, j > i) of these rows
            valid = np.arange(r0, n)[None, :] > np.arange(r0, r1)[:, None]
            same = cls[r0:r1, None] == cls[None, r0:]
            pos = same & valid
            neg = valid & ~same
            yield sims[pos], np.broadcast_to(cls[r0:r1, None], sims.shape)[pos], sims[neg]

    def histograms(self, bins: int) -> tuple[np.ndarray, np.ndarray]:
        """``(positive, negative)`` int64 pair counts per bin (see :func:`bin_index`)."""
        pos_hist = np.zeros(bins, dtype=np.int64)
        neg_hist = np.zeros(bins, dtype=np.int64)
        for pos, _, neg in self.blocks():
            pos_hist += np.bincount(bin_index(pos, bins), minlength=bins)
            neg_hist += np.bincount(bin_index(neg, bins), minlength=bins)
        return pos_hist, neg_hist

    def refine(self, intervals: list[tuple[int, int]], bins: int) -> list[Refined]:
        """Exact values inside each bin interval ``(lo, hi)`` and per-class positive counts above it."""
        c = self.num_classes
        parts: list[tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], np.ndarray]] = [
            ([], [], [], np.zeros(c, dtype=np.int64)) for _ in intervals]
        for pos, pos_cls, neg in self.blocks():
            pb, nb = bin_index(pos, bins), bin_index(neg, bins)
            for (lo, hi), (pv, pc, nv, above) in zip(intervals, parts, strict=True):
                inside = (pb >= lo) & (pb <= hi)
                pv.append(pos[inside])
                pc.append(pos_cls[inside])
                nv.append(neg[(nb >= lo) & (nb <= hi)])
                above += np.bincount(pos_cls[pb > hi], minlength=c)
        return [Refined(lo, hi, _cat(pv, np.float64), _cat(pc, np.int64), _cat(nv, np.float64), above)
                for (lo, hi), (pv, pc, nv, above) in zip(intervals, parts, strict=True)]


def _cat(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype=dtype)
