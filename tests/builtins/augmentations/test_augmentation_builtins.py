"""The built-in augmentation policies (plugins/augmentations) and the engine's evaluation transform give exactly
the tensors of the former ``build_transform`` (kept verbatim in ``augment_oracle.py``) for the same seed."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from augment_oracle import old_build_train_views, old_build_transform

import dmlplug
from dmlplug.context import BuildContext
from dmlplug.protocols import Augmentation

POLICIES = ("dml", "light", "none")
CTX = BuildContext(host=dmlplug.plugin_host())  # the registry the policies are named in


def _photo(seed=0, size=(50, 70)):
    from PIL import Image

    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8))


def _same(new, old, image, seeds=(0, 1, 7)):
    for seed in seeds:
        torch.manual_seed(seed)
        a = new(image)
        torch.manual_seed(seed)
        b = old(image)
        if isinstance(a, tuple):
            assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), seed
        else:
            assert torch.equal(a, b), seed


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("size", [32, 48])
def test_registered_policies_augment_exactly_as_before(policy, size):
    augmentation = dmlplug.create("augmentation", policy, image_size=size)
    assert isinstance(augmentation, Augmentation)
    old = old_build_transform("train", augment=policy, image_size=size)
    for image in (_photo(), _photo(1, (20, 90))):
        _same(augmentation, old, image)
    # a uint8 tensor image (decoded JPEG) gives the same tensors as the PIL image
    tensor = torch.from_numpy(np.array(_photo())).permute(2, 0, 1).contiguous()
    _same(augmentation, old, tensor)


def _recipe(augment, resize_size=None):
    from tests.shared.recipes import load_recipe

    data = {"dataset": {"name": "glyphs"}, "image_size": 32, "augment": augment}
    if resize_size is not None:
        data["resize_size"] = resize_size
    return load_recipe({"data": data, "backbone": {"name": "timm"}, "loss": {"name": "triplet"}})


@pytest.mark.parametrize(("policy", "resize_size"), [(p, r) for p in POLICIES for r in (None, 40)])
def test_the_engines_transforms_are_those_of_before(policy, resize_size):
    from dmlplug.engine.build import build_transforms

    recipe = _recipe(policy, resize_size)
    train, test = build_transforms(recipe, SimpleNamespace(default_augment="dml"), ctx=CTX)
    tensor = torch.from_numpy(np.array(_photo())).permute(2, 0, 1).contiguous()  # what load_tensor hands them
    for image in (_photo(), tensor):
        _same(train, old_build_transform("train", augment=policy, image_size=32, resize_size=resize_size), image)
        _same(test, old_build_transform("test", augment=policy, image_size=32, resize_size=resize_size), image)


@pytest.mark.parametrize("policy", POLICIES)
def test_extra_views_are_augmented_as_before(policy):
    """``none`` says its extra views use ``dml`` (an un-augmented second view would equal the first)."""
    from dmlplug.data.transforms import MultiView
    from dmlplug.engine.build import build_transforms

    train, _ = build_transforms(_recipe(policy), SimpleNamespace(default_augment="dml"), views=3, ctx=CTX)
    assert isinstance(train, MultiView) and len(train.transforms) == 3
    _same(train, old_build_train_views(augment=policy, image_size=32, views=3), _photo())


def test_auto_is_the_datasets_default_augmentation():
    from dmlplug.engine.build import build_transforms
    from dmlplug.errors import ComponentError

    recipe = _recipe("auto")
    assert "data.augment" not in recipe.components and recipe.resolved()["data"]["augment"] == "auto"
    for default in POLICIES:
        train, test = build_transforms(recipe, SimpleNamespace(default_augment=default), ctx=CTX)
        _same(train, old_build_transform("train", augment=default, image_size=32), _photo())
        _same(test, old_build_transform("test", augment=default, image_size=32), _photo())
    with pytest.raises(ComponentError, match="unknown augmentation 'lite'.*did you mean 'light'") as info:
        build_transforms(recipe, SimpleNamespace(default_augment="lite"), ctx=CTX)
    assert "auto" in info.value.where


@pytest.mark.parametrize("resize_size", [None, 40])
def test_none_trains_on_the_evaluation_view(resize_size):
    # With [data] resize_size, the evaluation view is the protocol's shorter-side resize + centre crop, and
    # `none` trains on it (as before); without, both are the square resize.
    from dmlplug.engine.build import build_transforms

    train, test = build_transforms(_recipe("none", resize_size), SimpleNamespace(default_augment="dml"), ctx=CTX)
    _same(train, test, _photo())
    _same(test, old_build_transform("test", augment="none", image_size=32, resize_size=resize_size), _photo())


def test_policies_need_the_image_size():
    from dmlplug.errors import ComponentError

    with pytest.raises(ComponentError, match="augmentation 'dml' .* needs image_size"):
        CTX.build("augmentation", {"name": "dml"})
