"""From selected candidate splits (class indices) to a :class:`SplitFile` (class names, episodes)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dmlplug.errors import DataError
from dmlplug_builtins.oodml.episodes import partition_train_val, sample_episodes
from dmlplug_builtins.oodml.splitfile import OodSplit, SplitFile
from dmlplug_builtins.oodml.swapping import SplitCandidate


def build_split_file(
    selected: Sequence[SplitCandidate],
    class_names: Sequence[str],
    images_by_class: Mapping[str, Sequence[str]],
    *,
    dataset: str | None = None,
    val_fraction: float = 0.25,
    shots: Iterable[int] = (2, 5, 10),
    episodes: int = 10,
    seed: int = 0,
    info: Mapping[str, Any] | None = None,
) -> SplitFile:
    """Name the classes of the selected splits and add validation partitions and few-shot episodes.

    Splits get ids ``1 .. N`` in order of increasing FID; class lists are sorted by name (like the
    published files), so label indices do not depend on the swap order. Episodes and partitions are
    seeded per split (``seed + id``) so that regenerating one split reproduces it.

    Args:
        selected: The chosen candidates (e.g. from :func:`select_evenly`).
        class_names: Name of every class index used by the candidates.
        images_by_class: Class name -> image ids, for at least every test class.
        dataset: Dataset name recorded in the file.
        val_fraction: Fraction of each split's training classes held out for validation.
        shots: Few-shot support sizes.
        episodes: Episodes per support size.
        seed: Base seed of partitions and episodes.
        info: Provenance recorded in the file (feature extractor, swapping parameters …).

    Returns:
        The validated :class:`SplitFile` (``source="generated"``).

    Raises:
        DataError: A test class has no images listed or too few for the requested shots.
    """
    splits = []
    for split_id, candidate in enumerate(sorted(selected, key=lambda c: c.fid), start=1):
        train = sorted(class_names[c] for c in candidate.train)
        test = sorted(class_names[c] for c in candidate.test)
        missing = [c for c in test if c not in images_by_class]
        if missing:
            raise DataError(f"no images listed for test class {missing[0]!r} of split {split_id}")
        split_train, split_val = partition_train_val(train, val_fraction=val_fraction, seed=seed + split_id)
        splits.append(
            OodSplit(
                id=split_id,
                fid=candidate.fid,
                train=train,
                test=test,
                split_train=split_train,
                split_val=split_val,
                episodes=sample_episodes({c: images_by_class[c] for c in test}, shots=shots,
                                         episodes=episodes, seed=seed + split_id),
                generator_key=candidate.key,
            )
        )
    return SplitFile(dataset=dataset, source="generated", info=dict(info or {}), splits=splits)
