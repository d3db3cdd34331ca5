"""Semantics of the built-in samplers beyond the registry-wide contract."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dmlplug.errors import ComponentError
from dmlplug.testing import build, load_host, make_context, sampler_context, uneven_labels

HOST = load_host()


def _labels(sizes) -> np.ndarray:
    return np.repeat(np.arange(len(sizes)), sizes).astype(np.int64)


def _sampler(name, labels, batch_size, **params):
    ctx = make_context(train_labels=labels, batch_size=batch_size, seed=7, train_super_labels=labels // 3)
    sampler = build("samplers", name, ctx, **params)
    sampler.set_epoch(1)
    return sampler


def test_m_per_class_has_m_samples_of_distinct_classes():
    labels = _labels([2, 5, 9, 4, 6, 3, 8, 7])  # class 0 has fewer than m samples: drawn with replacement
    sampler = _sampler("m_per_class", labels, 12, m=3)
    seen = np.zeros(8)
    for batch in sampler:
        counts = np.bincount(labels[batch], minlength=8)
        assert sorted(counts[counts > 0]) == [3, 3, 3, 3]
        for c in np.flatnonzero(counts):
            members = [i for i in batch if labels[i] == c]
            if (labels == c).sum() >= 3:
                assert len(set(members)) == 3  # without replacement when the class is big enough
        seen += counts > 0
    assert len(sampler) == len(labels) // 12
    assert seen.max() - seen.min() <= 1  # the class cycle visits every class equally often


def test_class_random_draws_k_per_class_draw():
    labels = _labels([5] * 10)
    sampler = _sampler("class_random", labels, 8, k=2)
    for batch in sampler:
        # Consecutive pairs come from one class draw (duplicated classes/samples are allowed).
        assert all(labels[batch[i]] == labels[batch[i + 1]] for i in range(0, 8, 2))


def test_class_balanced_equalises_rare_and_frequent_classes():
    labels = _labels([40, 4, 4, 40])
    sampler = _sampler("class_balanced", labels, 8, batches_per_epoch=500)
    counts = np.zeros(4)
    for batch in sampler:
        assert len(set(batch)) == 8
        counts += np.bincount(labels[batch], minlength=4)
    assert np.abs(counts / counts.sum() - 0.25).max() < 0.03


def test_hierarchical_batches_hold_the_requested_super_classes():
    labels = _labels([4] * 12)  # super-class = label // 3: four super-classes of three classes
    sampler = _sampler("hierarchical", labels, 8, m=2, super_classes_per_batch=2)
    for batch in sampler:
        supers = labels[batch] // 3
        assert len(set(supers.tolist())) == 2 and np.bincount(supers).max() == 4


def test_batches_per_epoch_defines_the_epoch():
    assert len(_sampler("random", _labels([5] * 4), 4, batches_per_epoch=9)) == 9
    assert len(list(_sampler("random", _labels([5] * 4), 4, batches_per_epoch=9))) == 9


@pytest.mark.parametrize(("name", "params", "message"), [
    ("m_per_class", {"m": 3}, "not divisible"),
    ("class_random", {"k": 3}, "not divisible"),
    ("m_per_class", {"m": 1}, "distinct classes"),
    ("hierarchical", {"m": 3, "super_classes_per_batch": 2}, "not divisible"),
])
def test_impossible_batch_layouts_are_build_errors(name, params, message):
    with pytest.raises(ComponentError, match=message):
        _sampler(name, _labels([5] * 4), 8, **params)


def test_hierarchical_without_super_labels_is_a_build_error():
    ctx = make_context(train_labels=_labels([4] * 4), batch_size=4)
    with pytest.raises(ComponentError, match="super-class"):
        build("samplers", "hierarchical", ctx, m=2, super_classes_per_batch=2)


@pytest.mark.parametrize("name", HOST.registry.names("samplers"))
def test_sampler_covers_classes_evenly(name):
    """Over many batches, class-aware samplers visit classes evenly and random follows the data."""
    info = HOST.registry.get("samplers", name)
    labels = uneven_labels()
    sampler = build("samplers", name, sampler_context(HOST, info, labels))
    counts = np.zeros(12)
    for epoch in range(1, 41):
        sampler.set_epoch(epoch)
        for batch in sampler:
            counts += np.bincount(labels[batch], minlength=12)
    share = counts / counts.sum()
    if name == "random":
        expected = np.bincount(labels) / len(labels)
    elif name == "hierarchical":
        return  # balanced over super-classes, not classes: test_hierarchical_batches_hold_the_requested_super_classes
    else:
        expected = np.full(12, 1 / 12)
    assert np.abs(share - expected).max() < 0.25 * expected.max(), f"{name}: {np.round(share, 3)}"
    assert math.isclose(share.sum(), 1.0)


# ------------------------------------------------------------------------------------------------ declarations


@pytest.mark.parametrize(("name", "params", "expected"), [
    ("m_per_class", {"m": 8}, 8), ("class_random", {"k": 8}, 8),
    ("hierarchical", {"m": 2, "super_classes_per_batch": 4}, 2), ("random", {}, None), ("class_balanced", {}, None),
])
def test_samplers_declare_the_samples_of_a_class_they_put_in_a_batch(name, params, expected):
    from dmlplug.testing import check_sampler

    info = HOST.registry.get("samplers", name)
    assert info.validate(params, "data.sampler").per_class_in_batch() == expected
    check_sampler(name, host=HOST, params=params)  # the kit checks the batches against the declaration


def test_the_kit_refuses_a_wrong_per_class_declaration():
    import types

    from dmlplug import hookimpl
    from dmlplug.testing import ContractError, check_plugin

    info = HOST.registry.get("samplers", "m_per_class")

    class Wrong(info.params):
        def per_class_in_batch(self) -> int:
            return 3  # the batches hold m = 4 of each class

    @hookimpl
    def register_samplers(register):
        register("wrongly_declared", info.factory, params=Wrong)

    plugin = types.ModuleType("wrong_samplers")
    plugin.register_samplers = register_samplers
    with pytest.raises(ContractError, match=r"declares 3 samples of a class per batch, but a batch holds \[4, 4"):
        check_plugin(plugin)
