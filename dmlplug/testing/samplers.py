"""Contract check of batch samplers."""

from __future__ import annotations

from typing import Any

from dmlplug.context import BuildContext
from dmlplug.plugins import PluginHost
from dmlplug.testing.fixtures import Declared, build, expect, load_host, make_context


def sampler_context(host: PluginHost, info: Any, labels: Any, batch_size: int = 16, seed: int = 3) -> BuildContext:
    """A context for a sampler: ``labels`` as training labels, super-labels ``labels % 4`` when required."""
    missing = set(info.requires) - {"dataset:super_labels"}
    expect(not missing, f"sampler {info.name!r}: dmlplug.testing cannot provide {sorted(missing)}")
    super_labels = labels % 4 if "dataset:super_labels" in info.requires else None
    return make_context(host, train_labels=labels, batch_size=batch_size, seed=seed, train_super_labels=super_labels)


def uneven_labels() -> Any:
    """12 classes of sizes 3..14 (some smaller than a per-class group) in shuffled order."""
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.permutation(np.repeat(np.arange(12), np.arange(3, 15))).astype(np.int64)


def check_sampler(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """Full batches of valid indices, ``len`` = batches per epoch, batches a function of (seed, epoch) only.

    A sampler that declares ``Params.per_class_in_batch()`` holds a multiple of that many samples of every class
    in a batch (a multiple: a class drawn twice, as SPC-k may, has twice as many).
    """
    host = host or load_host()
    params = params or {}
    info = Declared(host, "samplers", name, params)
    labels = uneven_labels()

    def make(seed: int = 3) -> Any:
        return build("samplers", name, sampler_context(host, info, labels, seed=seed), **params)

    sampler = make()
    expect(len(sampler) == len(labels) // 16, f"sampler {name!r}: len {len(sampler)}, expected {len(labels) // 16}")
    sampler.set_epoch(1)
    first = list(sampler)
    expect(len(first) == len(sampler), f"sampler {name!r}: yields {len(first)} batches, len says {len(sampler)}")
    for batch in first:
        expect(len(batch) == 16 and all(isinstance(i, int) and 0 <= i < len(labels) for i in batch),
               f"sampler {name!r}: batches must be 16 int indices into the dataset, got {batch!r}")
    expect(list(sampler) == first, f"sampler {name!r}: iterating twice in one epoch must give the same batches")
    _check_per_class(name, info.params.per_class_in_batch(), labels, first)
    again = make()
    again.set_epoch(2)
    second = list(again)
    again.set_epoch(1)
    expect(list(again) == first, f"sampler {name!r}: batches must depend on (seed, epoch) only")
    expect(second != first, f"sampler {name!r}: different epochs must give different batches")
    other = make(seed=4)
    other.set_epoch(1)
    expect(list(other) != first, f"sampler {name!r}: different seeds must give different batches")


def _check_per_class(name: str, per_class: int | None, labels: Any, batches: list[list[int]]) -> None:
    import numpy as np

    if per_class is None:
        return  # a sampler that does not group by class
    for batch in batches:
        counts = np.bincount(labels[batch])
        expect(not (counts % per_class).any(),
               f"sampler {name!r}: Params.per_class_in_batch() declares {per_class} samples of a class per batch, "
               f"but a batch holds {sorted(counts[counts > 0].tolist())} of its classes")
