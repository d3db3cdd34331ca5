"""Choosing N splits that cover the FID range evenly (docs/oodml.md)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from dmlplug.errors import DataError
from dmlplug_builtins.oodml.swapping import SplitCandidate


def select_evenly(
    candidates: Sequence[SplitCandidate],
    num_splits: int,
    *,
    always_include: Iterable[str] = ("0",),
    include_extremes: bool = True,
) -> list[SplitCandidate]:
    """Pick ``num_splits`` candidates whose FIDs best match evenly spaced targets.

    The targets are ``num_splits`` equally spaced values from the smallest to the largest candidate FID
    (near-i.i.d. to the hardest split). Candidates are matched to targets in FID order, minimising the sum
    of absolute FID deviations (an exact dynamic programme; in one dimension an optimal matching never
    crosses). Candidates named in ``always_include`` (by key; default: the dataset's default split, key
    ``"0"``, when present) are always kept, and so are the least and the most shifted candidates unless
    ``include_extremes`` is false.

    Args:
        candidates: Candidate splits (unique keys), e.g. from :func:`generate_candidates`.
        num_splits: How many splits to choose (>= 2).
        always_include: Keys that must be selected; keys not among the candidates are ignored.
        include_extremes: Always keep the candidates with the smallest and the largest FID.

    Returns:
        The chosen candidates sorted by increasing FID.

    Raises:
        DataError: Fewer candidates than requested, or more required keys than ``num_splits``.
    """
    if num_splits < 2:
        raise ValueError(f"num_splits must be >= 2, got {num_splits}")
    keys = [c.key for c in candidates]
    if len(set(keys)) != len(keys):
        raise ValueError("candidate keys must be unique")
    if len(candidates) < num_splits:
        raise DataError(f"only {len(candidates)} candidate splits for {num_splits} requested",
                        fix="ask for fewer splits or generate more candidates (more swap iterations)")
    ordered = sorted(candidates, key=lambda c: c.fid)
    required = set(always_include)
    forced = [c.key in required for c in ordered]
    if include_extremes:
        forced[0] = forced[-1] = True
    if sum(forced) > num_splits:
        raise DataError(f"{sum(forced)} splits must be kept but only {num_splits} are requested")
    fids = np.array([c.fid for c in ordered])
    targets = np.linspace(fids[0], fids[-1], num_splits)
    chosen = _monotone_matching(fids, targets, forced)
    return [ordered[i] for i in chosen]


def _monotone_matching(values: np.ndarray, targets: np.ndarray, forced: list[bool]) -> list[int]:
    """Indices of sorted ``values`` matched one-to-one, in order, to sorted ``targets`` at least cost."""
    n, m = len(values), len(targets)
    cost = np.full((n + 1, m + 1), np.inf)
    cost[0, 0] = 0.0
    took = np.zeros((n + 1, m + 1), dtype=bool)  # whether the best path to (i, j) matched value i-1
    for i in range(n):
        for j in range(m + 1):
            if not np.isfinite(cost[i, j]):
                continue
            if not forced[i] and cost[i, j] < cost[i + 1, j]:
                cost[i + 1, j], took[i + 1, j] = cost[i, j], False
            if j < m:
                matched = cost[i, j] + abs(values[i] - targets[j])
                if matched < cost[i + 1, j + 1]:
                    cost[i + 1, j + 1], took[i + 1, j + 1] = matched, True
    if not np.isfinite(cost[n, m]):
        raise DataError("no selection satisfies the required splits")
    chosen, j = [], m
    for i in range(n, 0, -1):
        if took[i, j]:
            chosen.append(i - 1)
            j -= 1
    return chosen[::-1]
