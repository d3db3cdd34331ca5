"""Contract check of datasets: splits, labels and the declarations ``dmlplug validate`` relies on."""

from __future__ import annotations

from typing import Any

from dmlplug.plugins import PluginHost
from dmlplug.testing.fixtures import ContractError, Declared, build, expect, load_host, make_context


def check_dataset(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """A dataset builds its splits with dense int64 labels, and its declarations match what it built.

    A dataset reads data, so ``params`` must point at some (a tiny tree the plugin's tests write, in the real
    layout). Checked: every split's ``labels`` are int64 ``0 .. num_classes-1`` with one ``class_names`` entry
    per class and its first image loads; ``Params.has_validation_split()`` (unless ``None``: the files decide)
    says whether ``val`` exists; ``Params.split_sizes()`` (unless ``None``) names exactly the built splits, with
    their class counts and the images of their smallest class; ``Params.validation_parameter()`` (unless
    ``None``) is a parameter that declares a val split at 0.25; the ``super_labels`` tag means the training
    source carries ``attributes["super_labels"]`` aligned with its labels.
    """
    import numpy as np

    from dmlplug.errors import DmlplugError

    host = host or load_host()
    try:
        info = Declared(host, "datasets", name, params)
        bundle = build("datasets", name, make_context(host), **(params or {}))
    except DmlplugError as exc:
        raise ContractError(
            f"dataset {name!r} cannot be built with {params or 'its defaults'}: {exc.what}; give it a tiny tree "
            f"in its real layout: check_dataset({name!r}, params={{...}}), or in check_plugin: "
            f"**{{'datasets.{name}': {{'params': {{...}}}}}}") from exc
    splits = {"train": bundle.train, "test": bundle.test, "val": bundle.val}
    for split, source in splits.items():
        if source is None:
            continue
        labels = np.asarray(source.labels)
        expect(labels.dtype == np.int64 and len(labels) > 0, f"dataset {name!r}: {split} labels must be a "
                                                             f"non-empty int64 array, got {labels.dtype}")
        expect(set(np.unique(labels).tolist()) == set(range(len(source.class_names))),
               f"dataset {name!r}: {split} labels are not 0 .. {len(source.class_names) - 1} "
               "(one class_names entry per class)")
        expect(source.load_image(0) is not None, f"dataset {name!r}: the first {split} image does not load")
    declared = info.params.has_validation_split()
    if declared is not None:
        expect(declared == (bundle.val is not None),
               f"dataset {name!r}: Params.has_validation_split() says {declared}, but the built dataset "
               f"{'has' if bundle.val is not None else 'has no'} val split")
    _check_split_sizes(name, info.params.split_sizes(), splits)
    _check_validation_parameter(name, info.params)
    if "super_labels" in info.tags:
        supers = (getattr(bundle.train, "attributes", None) or {}).get("super_labels")
        expect(supers is not None and len(supers) == len(bundle.train.labels),
               f"dataset {name!r}: tagged super_labels, but the training source has no aligned "
               "attributes['super_labels']")


def _check_validation_parameter(name: str, params: Any) -> None:
    """``Params.validation_parameter()`` names a parameter, and a fraction of 0.25 in it declares a val split."""
    from pydantic import ValidationError

    key = params.validation_parameter()
    if key is None:
        return
    expect(key in type(params).model_fields, f"dataset {name!r}: Params.validation_parameter() names {key!r}, "
                                             "which is not one of its parameters")
    try:
        carved = type(params).model_validate({**params.model_dump(), key: 0.25})
    except ValidationError as exc:
        raise ContractError(f"dataset {name!r}: {key} = 0.25 (Params.validation_parameter()) is refused: "
                            f"{exc.errors()[0]['msg']}") from None
    expect(carved.has_validation_split() is not False,
           f"dataset {name!r}: with {key} = 0.25 (Params.validation_parameter()) Params.has_validation_split() "
           "still says there is no val split")


def _check_split_sizes(name: str, declared: Any, splits: dict[str, Any]) -> None:
    import numpy as np

    if declared is None:
        return  # the data decides: the run checks the built splits itself
    built = {split: source for split, source in splits.items() if source is not None}
    expect(set(declared) == set(built), f"dataset {name!r}: Params.split_sizes() declares the splits "
                                        f"{sorted(declared)}, the built dataset has {sorted(built)}")
    for split, source in built.items():
        counts = np.bincount(np.asarray(source.labels))
        actual = (int((counts > 0).sum()), int(counts[counts > 0].min()))
        size = declared[split]
        expect(size.classes == actual[0] and size.min_images in (None, actual[1]),
               f"dataset {name!r}: Params.split_sizes() declares {split} = {size}, but the built split has "
               f"{actual[0]} classes, the smallest with {actual[1]} images")
