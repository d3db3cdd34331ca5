"""Split generation by class swapping and class removal (docs/oodml.md).

Everything works on one table of per-class mean feature vectors (``class_means[c]`` for class index
``c``) and, for removal, per-class image counts. A split is a pair of tuples of class indices; the
tuples are *slot* lists: swapping exchanges the class in train slot ``i`` with the class in test slot
``j``, so positions stay meaningful from one split to the next (the swap history refers to slots, as in
the reference implementation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dmlplug.errors import DataError
from dmlplug_builtins.oodml.frechet import DEFAULT_EPS, frechet_distance


@dataclass(frozen=True)
class SplitCandidate:
    """One recorded train/test partition.

    Attributes:
        key: How it was made: the number of classes swapped so far (``"6"``; negative for inverse swaps,
            ``"-10"``) or ``"R<n>"`` after removing ``n`` classes from each side.
        train: Class indices on the train side, in slot order.
        test: Class indices on the test side, in slot order.
        fid: Fréchet distance between the train and test class means.
    """

    key: str
    train: tuple[int, ...]
    test: tuple[int, ...]
    fid: float


def class_means(features: np.ndarray, labels: np.ndarray, num_classes: int | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """Per-class mean feature vectors and image counts.

    Args:
        features: ``N×F`` features, one row per image.
        labels: ``N`` integer class indices in ``0 .. C-1``.
        num_classes: ``C``; defaults to ``labels.max() + 1``.

    Returns:
        ``(means, counts)``: ``C×F`` float64 means and ``C`` int64 counts.

    Raises:
        DataError: A class in ``0 .. C-1`` has no image.
    """
    features = np.asarray(features, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    if features.ndim != 2 or labels.shape != (features.shape[0],):
        raise ValueError(f"features must be N×F and labels N, got {features.shape} and {labels.shape}")
    size = int(labels.max()) + 1 if num_classes is None else num_classes
    counts = np.bincount(labels, minlength=size).astype(np.int64)
    if (counts == 0).any():
        raise DataError(f"class {int(np.argmin(counts))} has no image; every class needs a mean feature")
    sums = np.zeros((size, features.shape[1]))
    np.add.at(sums, labels, features)
    return sums / counts[:, None], counts


def swap_classes(
    class_means: np.ndarray,
    train: Sequence[int],
    test: Sequence[int],
    *,
    swaps_per_iter: int = 2,
    iterations: int = 25,
    history: int = 5,
    inverse: bool = False,
    eps: float = DEFAULT_EPS,
) -> list[SplitCandidate]:
    """Increase (or, inverse, decrease) the train/test shift by exchanging classes.

    Each iteration first records the current split under key ``i * swaps_per_iter`` (negated when
    ``inverse``), then scores train classes by ``||m - mu_train|| - ||m - mu_test||`` and test classes by
    ``||m - mu_test|| - ||m - mu_train||`` (means of the class means, unweighted) and makes
    ``swaps_per_iter`` exchanges: the ``k``-th takes, on each side, the best-scored slot at sorted position
    ``>= k`` that is not among the last ``history`` slots swapped on that side (``inverse``: worst-scored).
    Scores are not recomputed within an iteration. The state after the last iteration's swaps is not
    recorded, like the reference (CARS/CUB: 25 iterations of 2 swaps give keys 0 … 48).

    Args:
        class_means: ``C×F`` mean feature vector of every class.
        train: Class indices of the starting train side (usually the dataset's default split).
        test: Class indices of the starting test side.
        swaps_per_iter: Exchanges per iteration (CUB/CARS 2, SOP 1000).
        iterations: Number of iterations (= recorded splits).
        history: Slots swapped in the last ``history`` exchanges of a side are not swapped again
            (reference 5; 30 for CUB's inverse run); 0 disables the rule.
        inverse: Swap the lowest-scored classes, producing splits less shifted than the start.
        eps: Fréchet-distance diagonal offset.

    Returns:
        The recorded splits in iteration order.

    Raises:
        ValueError: Invalid sizes or overlapping sides.
    """
    means = _check_split(class_means, train, test)
    if swaps_per_iter < 1 or iterations < 1 or history < 0:
        raise ValueError("swaps_per_iter and iterations must be >= 1 and history >= 0")
    train_slots, test_slots = list(train), list(test)
    recent_train: list[int] = []
    recent_test: list[int] = []
    sign = -1 if inverse else 1
    recorded = []
    for i in range(iterations):
        recorded.append(_record(str(sign * i * swaps_per_iter), train_slots, test_slots, means, eps))
        train_order, test_order = _ranked_slots(means, train_slots, test_slots, lowest_first=inverse)
        for k in range(swaps_per_iter):
            a = _first_free(train_order, k, recent_train[-history:] if history else [])
            b = _first_free(test_order, k, recent_test[-history:] if history else [])
            if a is None or b is None:
                break  # every remaining candidate was swapped too recently: nothing sensible to exchange
            recent_train.append(a)
            recent_test.append(b)
            train_slots[a], test_slots[b] = test_slots[b], train_slots[a]
    return recorded


def remove_classes(
    class_means: np.ndarray,
    class_counts: Sequence[int],
    train: Sequence[int],
    test: Sequence[int],
    *,
    removals_per_iter: int = 2,
    min_remaining: float = 0.5,
    max_iterations: int | None = None,
    min_classes: int = 2,
    eps: float = DEFAULT_EPS,
) -> list[SplitCandidate]:
    """Shift beyond saturation by deleting the classes that bridge train and test (docs/oodml.md, paper).

    Each iteration removes the ``removals_per_iter`` top-scored train classes (closest to the test mean
    relative to the train mean, the swapping score) and likewise on the test side, and records the result
    under ``R<n>`` (``n`` classes removed per side so far). It stops before a removal would leave either
    side with less than ``min_remaining`` of its starting image count or fewer than ``min_classes``
    classes, or after ``max_iterations``.

    This follows the paper's description; the public reference script differs (it removes only when a
    swap would not raise the FID and is known not to reproduce the published splits, docs/oodml.md).

    Args:
        class_means: ``C×F`` mean feature vector of every class.
        class_counts: ``C`` image counts.
        train: Class indices of the starting train side (usually the last swapped split).
        test: Class indices of the starting test side.
        removals_per_iter: Classes removed from each side per iteration.
        min_remaining: Fraction of each side's starting images that must remain.
        max_iterations: Upper bound on iterations (``None``: until the data limit).
        min_classes: Fewest classes a side may keep (the covariance needs two).
        eps: Fréchet-distance diagonal offset.

    Returns:
        The splits after each removal step (the start is not included).
    """
    means = _check_split(class_means, train, test)
    counts = np.asarray(class_counts, dtype=np.int64)
    if counts.shape != (len(means),):
        raise ValueError(f"class_counts must have {len(means)} entries, got shape {counts.shape}")
    if removals_per_iter < 1 or not 0.0 <= min_remaining <= 1.0 or min_classes < 2:
        raise ValueError("need removals_per_iter >= 1, 0 <= min_remaining <= 1 and min_classes >= 2")
    train_slots, test_slots = list(train), list(test)
    floor_train = min_remaining * counts[train_slots].sum()
    floor_test = min_remaining * counts[test_slots].sum()
    recorded: list[SplitCandidate] = []
    removed = 0
    while max_iterations is None or len(recorded) < max_iterations:
        train_order, test_order = _ranked_slots(means, train_slots, test_slots, lowest_first=False)
        drop_train = set(train_order[:removals_per_iter])
        drop_test = set(test_order[:removals_per_iter])
        kept_train = [c for s, c in enumerate(train_slots) if s not in drop_train]
        kept_test = [c for s, c in enumerate(test_slots) if s not in drop_test]
        if (
            min(len(kept_train), len(kept_test)) < min_classes
            or counts[kept_train].sum() < floor_train
            or counts[kept_test].sum() < floor_test
        ):
            break
        train_slots, test_slots = kept_train, kept_test
        removed += removals_per_iter
        recorded.append(_record(f"R{removed}", train_slots, test_slots, means, eps))
    return recorded


def generate_candidates(
    class_means: np.ndarray,
    class_counts: Sequence[int],
    train: Sequence[int],
    test: Sequence[int],
    *,
    swaps_per_iter: int = 2,
    iterations: int = 25,
    history: int = 5,
    inverse_iterations: int = 0,
    inverse_history: int = 30,
    removal: bool = True,
    removals_per_iter: int | None = None,
    min_remaining: float = 0.5,
    eps: float = DEFAULT_EPS,
) -> list[SplitCandidate]:
    """All candidate splits of a dataset: inverse swaps, swaps, then removal from the last swapped split.

    Args:
        class_means: ``C×F`` mean feature vector of every class.
        class_counts: ``C`` image counts.
        train: Class indices of the dataset's default train split.
        test: Class indices of the default test split.
        swaps_per_iter: Exchanges per swapping iteration.
        iterations: Swapping iterations.
        history: Swap history length.
        inverse_iterations: Iterations of the inverse run (0: none; CUB used ``iterations - 10``).
        inverse_history: History length of the inverse run (CUB: 30).
        removal: Whether to continue with class removal.
        removals_per_iter: Classes removed per side and iteration (default: ``swaps_per_iter``).
        min_remaining: Fraction of each side's images that removal must keep.
        eps: Fréchet-distance diagonal offset.

    Returns:
        Candidates with unique keys (the default split once, key ``"0"``), inverse ones first.
    """
    candidates: list[SplitCandidate] = []
    if inverse_iterations:
        inverse = swap_classes(class_means, train, test, swaps_per_iter=swaps_per_iter,
                               iterations=inverse_iterations, history=inverse_history, inverse=True, eps=eps)
        candidates.extend(reversed(inverse[1:]))  # key "0" comes from the forward run
    forward = swap_classes(class_means, train, test, swaps_per_iter=swaps_per_iter, iterations=iterations,
                           history=history, eps=eps)
    candidates.extend(forward)
    if removal:
        last = forward[-1]
        candidates.extend(remove_classes(class_means, class_counts, last.train, last.test,
                                         removals_per_iter=removals_per_iter or swaps_per_iter,
                                         min_remaining=min_remaining, eps=eps))
    return candidates


def _check_split(class_means: np.ndarray, train: Sequence[int], test: Sequence[int]) -> np.ndarray:
    means = np.asarray(class_means, dtype=np.float64)
    if means.ndim != 2:
        raise ValueError(f"class_means must be C×F, got shape {means.shape}")
    every = [*train, *test]
    if len(set(every)) != len(every):
        raise ValueError("train and test must be disjoint lists of distinct class indices")
    if min(every) < 0 or max(every) >= len(means):
        raise ValueError(f"class indices must lie in 0 .. {len(means) - 1}")
    if min(len(train), len(test)) < 2:
        raise DataError("each side of a split needs at least two classes to measure its spread")
    return means


def _record(key: str, train: list[int], test: list[int], means: np.ndarray, eps: float) -> SplitCandidate:
    fid = frechet_distance(means[train], means[test], eps=eps)
    return SplitCandidate(key=key, train=tuple(train), test=tuple(test), fid=fid)


def _ranked_slots(means: np.ndarray, train: list[int], test: list[int], *, lowest_first: bool
                  ) -> tuple[list[int], list[int]]:
    """Slots of each side sorted by how much their class looks like the other side (best first)."""
    train_feats, test_feats = means[train], means[test]
    train_mean, test_mean = train_feats.mean(axis=0), test_feats.mean(axis=0)

    def distance(feats: np.ndarray, centre: np.ndarray) -> np.ndarray:
        return np.linalg.norm(feats - centre, axis=1)

    train_score = distance(train_feats, train_mean) - distance(train_feats, test_mean)
    test_score = distance(test_feats, test_mean) - distance(test_feats, train_mean)
    sign = 1.0 if lowest_first else -1.0
    # Stable sort: ties keep slot order, so the procedure is deterministic.
    return (np.argsort(sign * train_score, kind="stable").tolist(),
            np.argsort(sign * test_score, kind="stable").tolist())


def _first_free(order: list[int], start: int, blocked: list[int]) -> int | None:
    for slot in order[start:]:
        if slot not in blocked:
            return slot
    return None
