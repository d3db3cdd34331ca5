"""Dataset ``oodml_split``: a wrapped dataset's images re-partitioned by the classes of one ooDML split.

The wrapped dataset is built first (any registered dataset); its train, test and validation images are
pooled and split again by class name with :func:`dmlplug.data.splits.split_by_class_names`, so labels
follow the split file's class order. The bundle records the split in ``info["oodml_split"]`` (absolute
split-file path, id, part, FID): the few-shot evaluator and ``dmlplug fewshot`` take their stored episodes
from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmlplug.errors import DataError

WHERE = "data.dataset"


def select_split(bundle: Any, split_file: str | Path, split_id: int, part: str = "zero_shot", *,
                 search: Sequence[str | Path] = ()) -> Any:
    """Re-partition ``bundle`` by split ``split_id`` of ``split_file``.

    Args:
        bundle: The wrapped dataset's :class:`~dmlplug.data.DatasetBundle`.
        split_file: A split file, JSON (``dmlplug oodml splits``) or a published ooDML ``.pkl``.
        split_id: Id of the split.
        part: ``"zero_shot"``: train on the split's ``train`` classes, test on ``test``;
            ``"few_shot_base"``: train on ``split_train``, validate on ``split_val``, test on ``test``.
        search: Folders where a relative ``split_file`` is looked for when it is not found as given.

    Returns:
        The re-partitioned bundle.

    Raises:
        DataError: The split file is missing or invalid, has no split ``split_id``, or names classes the
            dataset does not have.
    """
    from dmlplug.data.splits import split_by_class_names
    from dmlplug_builtins.oodml.splitfile import locate, read_split_file

    path = locate(split_file, search)
    splits = read_split_file(path)
    ids = [s.id for s in splits.splits]
    if split_id not in ids:
        raise DataError(f"split file {split_file} has no split with id {split_id}", where=f"{WHERE}.split_id",
                        fix=f"use one of {ids}")
    split = splits.by_id(split_id)
    where = f"{WHERE}: split_file = {str(split_file)!r}, split_id = {split_id}"
    if part == "few_shot_base":
        selected = split_by_class_names(bundle, split.split_train, split.test, split.split_val, where=where)
    else:
        selected = split_by_class_names(bundle, split.train, split.test, where=where)
    selected.info["oodml_split"] = {"split_file": str(path.resolve()), "split_id": split_id, "part": part,
                                    "fid": split.fid}
    return selected
