"""Facts of a run that its results cannot be judged without: the data it saw and the parameters it trained.

``data.json`` records, per split, the images and classes the run used, with what the dataset plugin knows
about where they came from (root, layout, whether the split is the standard one: ``DatasetBundle.info``);
``model.json`` records the parameters of the model and of every optimizer parameter group. Both are written
when the run starts (again on a resume, since ``--force`` may have changed the recipe), so a ``results.json``
can be read without the data or the code at hand (docs/run-directory.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: Files written by :func:`write_facts`.
DATA = "data.json"
MODEL = "model.json"

#: ``DatasetBundle.info`` keys lifted to the top of ``data.json`` (``null`` when the dataset does not tell).
_LIFTED = ("root", "layout", "standard_split")


def data_facts(bundle: Any, dataset_name: str) -> dict[str, Any]:
    """Per-split counts of a :class:`~dmlplug.data.base.DatasetBundle` and the facts its ``info`` holds.

    Args:
        bundle: The built dataset bundle.
        dataset_name: The recipe's ``data.dataset.name``.
    """
    info = dict(bundle.info or {})
    splits: dict[str, Any] = {}
    for split in ("train", "val", "test"):
        source = getattr(bundle, split, None)
        if source is None:
            continue
        splits[split] = {"images": len(source), "classes": int(source.num_classes)}
    query, gallery = bundle.test_query_mask, bundle.test_gallery_mask
    if query is not None:
        splits["test"]["queries"] = int(query.sum())
    if gallery is not None:
        splits["test"]["gallery"] = int(gallery.sum())
    return {"dataset": dataset_name, **{key: info.get(key) for key in _LIFTED}, "splits": splits,
            "info": _plain(info)}


def model_facts(model: Any, optimizer: Any) -> dict[str, Any]:
    """Parameter counts of the model and of every optimizer parameter group (by its ``name``)."""
    params = list(model.parameters())
    groups = []
    for group in optimizer.param_groups:
        tensors = group["params"]
        groups.append({"name": group.get("name"), "tensors": len(tensors),
                       "parameters": sum(int(p.numel()) for p in tensors),
                       "trainable": sum(int(p.numel()) for p in tensors if p.requires_grad),
                       "lr": group.get("lr"), "weight_decay": group.get("weight_decay")})
    return {"parameters": sum(int(p.numel()) for p in params),
            "trainable": sum(int(p.numel()) for p in params if p.requires_grad),
            "optimizer": type(optimizer).__name__,
            "parameter_groups": groups}


def write_facts(run: Any) -> list[Path]:
    """Write ``data.json`` and ``model.json`` of a built run (rank 0 calls it); returns the paths."""
    from dmlplug.files import write_json

    c = run.components
    data = write_json(run.directory / DATA, data_facts(c.dataset, run.recipe.recipe.data.dataset.get("name")))
    model = write_json(run.directory / MODEL, model_facts(c.model, run.training.optimizer))
    return [data, model]


def _plain(value: Any) -> Any:
    """``value`` with only JSON types (numpy scalars and arrays, paths and the like made plain)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return _plain(value.tolist())
    return str(value)
