"""Seeded few-shot support episodes and train/validation class partitions (docs/oodml.md, docs/fewshot.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from dmlplug.errors import DataError
from dmlplug_builtins.oodml.splitfile import Episodes


def sample_episodes(
    images_by_class: Mapping[str, Sequence[str]],
    *,
    shots: Iterable[int] = (2, 5, 10),
    episodes: int = 10,
    seed: int = 0,
) -> Episodes:
    """Draw ``shots`` support images per class for every episode.

    Each ``(shots, episode)`` pair has its own random stream derived from ``(seed, shots, episode)``, so an
    episode does not change when other shot counts or more episodes are requested, and the images of a
    class are sorted before drawing, so the result does not depend on the order they were listed in.

    Args:
        images_by_class: Test class name -> its image ids (basenames or dataset-relative paths).
        shots: Support-set sizes per class (the reference stores 2, 5 and 10).
        episodes: Episodes per shot count; keys are ``0 .. episodes-1``.
        seed: Base seed.

    Returns:
        ``{shots: {episode: {class: [support image ids, sorted]}}}``.

    Raises:
        DataError: A class has no image left for the query set at some shot count.
    """
    shot_counts = sorted(set(int(k) for k in shots))
    if not shot_counts or shot_counts[0] < 1 or episodes < 1:
        raise ValueError("shot counts must be >= 1 and episodes >= 1")
    pools = {cls: sorted(set(images)) for cls, images in images_by_class.items()}
    for cls, pool in pools.items():
        if len(pool) <= shot_counts[-1]:
            raise DataError(
                f"class {cls!r} has {len(pool)} image(s); {shot_counts[-1]}-shot episodes need at least "
                f"{shot_counts[-1] + 1} (the rest are queries)",
                fix="use fewer shots (e.g. shots=(2, 5)) or a dataset with more images per class",
            )
    result: Episodes = {}
    for k in shot_counts:
        result[k] = {}
        for episode in range(episodes):
            rng = np.random.default_rng([seed, k, episode])
            result[k][episode] = {
                cls: sorted(pool[i] for i in rng.choice(len(pool), size=k, replace=False))
                for cls, pool in sorted(pools.items())
            }
    return result


def partition_train_val(
    train_classes: Sequence[str], *, val_fraction: float = 0.25, seed: int = 0
) -> tuple[list[str], list[str]]:
    """Split training classes into training and validation classes at random.

    The validation side gets ``round_half_up(val_fraction * n)`` classes, which gives the published CARS
    sizes (98 -> 73/25, 86 -> 64/22, 74 -> 55/19, 62 -> 46/16). Both lists keep the order of
    ``train_classes``.

    Args:
        train_classes: The split's training classes.
        val_fraction: Fraction of classes for validation, in ``[0, 1)``.
        seed: Seed of the draw.

    Returns:
        ``(split_train, split_val)``.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    classes = list(train_classes)
    num_val = int(np.floor(val_fraction * len(classes) + 0.5))
    rng = np.random.default_rng([seed, len(classes)])
    val_positions = set(rng.choice(len(classes), size=num_val, replace=False).tolist())
    split_train = [c for i, c in enumerate(classes) if i not in val_positions]
    split_val = [c for i, c in enumerate(classes) if i in val_positions]
    return split_train, split_val
