"""Per-sample seeding seeds only the generators an augmentation policy declares (``random_sources``).

Seeding python's ``random`` and numpy's global generator for every image cost ~0.9 ms of a 64-image batch
(benchmarks/seeding_cost.py); torchvision's v2 transforms draw from torch's default generator only, so the
built-in policies say so and the engine leaves the other two alone. A policy that says nothing is seeded from
all three, and the kit catches a policy that draws from a generator it does not declare.
"""

from __future__ import annotations

import random
import types

import numpy as np
import pytest
import torch

import dmlplug
from dmlplug.data.transforms import MultiView, random_sources
from dmlplug.engine.seeding import RANDOM_SOURCES, SeededDataset, SeededIndex
from dmlplug.testing import ContractError, check_augmentation, load_host


@pytest.mark.parametrize("name", ["dml", "light", "none"])
def test_builtin_policies_draw_from_torch_only_and_pass_the_kit(name):
    policy = dmlplug.create("augmentation", name, image_size=16)
    assert random_sources(policy) == {"torch"}
    check_augmentation(name)  # python and numpy left in different states: the outputs still agree


def test_a_policy_without_the_declaration_is_seeded_from_all_three():
    assert random_sources(lambda image: image) == RANDOM_SOURCES


def test_extra_views_draw_from_the_union_of_their_policies():
    torch_only = types.SimpleNamespace(random_sources=frozenset({"torch"}))
    numpy_too = types.SimpleNamespace(random_sources=frozenset({"torch", "numpy"}))
    assert random_sources(MultiView([torch_only, numpy_too])) == {"torch", "numpy"}
    assert random_sources(MultiView([torch_only, lambda image: image])) == RANDOM_SOURCES


class _NumpyJitter:
    """A policy that draws from numpy but declares torch only: the kit must catch it."""

    random_sources = frozenset({"torch"})

    def __call__(self, image):
        base = torch.zeros(3, 8, 8)
        return base + float(np.random.rand())


def test_the_kit_catches_a_policy_drawing_from_an_undeclared_generator():
    plugin = types.SimpleNamespace(__name__="numpy_jitter_policy")

    @dmlplug.hookimpl
    def register_augmentations(register):
        register("numpy_jitter", lambda params, ctx: _NumpyJitter())

    plugin.register_augmentations = register_augmentations
    host = load_host(plugin)
    with pytest.raises(ContractError, match=r"not reproducible under the same seeds of \['torch'\]"):
        check_augmentation("numpy_jitter", host=host)


class _Draws:
    def __len__(self):
        return 4

    def __getitem__(self, index):
        return torch.rand(()).item(), random.random(), float(np.random.rand())


def test_a_torch_only_dataset_leaves_python_and_numpy_alone():
    dataset = SeededDataset(_Draws(), frozenset({"torch"}))
    random.seed(1)
    np.random.seed(1)
    first = dataset.__getitems__([SeededIndex(0, 7), SeededIndex(1, 8)])
    random.seed(2)
    np.random.seed(2)
    second = dataset.__getitems__([SeededIndex(0, 7), SeededIndex(1, 8)])
    assert [item[0] for item in first] == [item[0] for item in second]  # torch: seeded per sample
    assert [item[1:] for item in first] != [item[1:] for item in second]  # python, numpy: not touched


def test_unknown_sources_are_refused():
    with pytest.raises(ValueError, match="unknown random sources"):
        SeededDataset(_Draws(), frozenset({"torch", "cupy"}))


def test_the_engine_seeds_what_the_recipes_policy_declares(tmp_path):
    from dmlplug.engine.run import Run
    from dmlplug.plugins import get_host
    from tests.shared.recipes import load_recipe

    host = get_host()
    recipe = load_recipe("recipes/quickstart.toml", {"data.dataset.num_classes": 40, "data.workers": 0},
                         registry=host.registry)
    run = Run(recipe, tmp_path / "run", host, "cpu", True)
    run.build()
    assert run.training.loader.dataset.sources == {"torch"}
