"""The smallest dataset a run accepts, checked once the data is built when the recipe cannot tell (issue 26).

Every split a run uses needs two classes (evaluated splits: two query classes); the engine checks it right after
building the dataset (and applying `[data]` class lists), before the sampler and the model. A sampler warns when
it takes more images of a class than the class has.
"""

from __future__ import annotations

import logging
import types

import numpy as np
import pytest
from pydantic import Field

from dmlplug import Params, hookimpl
from dmlplug.data import ArraySource, DatasetBundle
from dmlplug.data.splits import check_split_sizes, query_classes
from dmlplug.errors import DataError
from dmlplug.evaluation import EvalContext
from dmlplug.testing import build, make_context


def _source(sizes, name):
    labels = np.repeat(np.arange(len(sizes)), sizes)
    return ArraySource(np.zeros((len(labels), 4, 4), dtype=np.uint8), labels, [f"{name}{i}" for i in range(len(sizes))],
                       name=f"toy/{name}")


def _bundle(train=(3, 3), test=(3, 3), val=None, masks=(None, None)):
    return DatasetBundle(_source(train, "train"), _source(test, "test"), None if val is None else _source(val, "val"),
                         test_query_mask=masks[0], test_gallery_mask=masks[1])


@pytest.mark.parametrize(("bundle", "message"), [
    (_bundle(train=(5,)), r"the train split of the dataset has 1 class \(5 images\), fewer than the 2 classes"),
    (_bundle(test=(9,)), "the test split of the dataset has 1 class with a query with another item of its class"),
    (_bundle(test=(1, 1, 1, 1)), "has no query with another item of its class"),  # four classes of one image
    (_bundle(test=(2, 1, 1)), "has 1 class with a query"),
])
def test_a_split_below_the_minimum_is_a_data_error(bundle, message):
    with pytest.raises(DataError, match=message) as info:
        check_split_sizes(bundle)
    assert "at least 2 classes of 2 or more images" in info.value.fix


def test_the_minimum_is_met_by_two_query_classes():
    check_split_sizes(_bundle(train=(1, 1), test=(2, 2, 1)))
    check_split_sizes(_bundle(val=(1,)))  # val is checked only where asked (it is evaluated only to select)
    with pytest.raises(DataError, match="the val split"):
        check_split_sizes(_bundle(val=(2,)), ("train", "test", "val"))


def test_query_gallery_masks_decide_the_query_classes():
    # Class 0: a query and a gallery image; class 1: only queries; class 2: only gallery.
    masks = (np.array([1, 0, 1, 1, 0, 0], bool), np.array([0, 1, 0, 0, 1, 1], bool))
    with pytest.raises(DataError, match="1 class with a query"):
        check_split_sizes(_bundle(test=(2, 2, 2), masks=masks))


def test_query_classes_agree_with_the_evaluation_context():
    """Oracle: the classes of the queries EvalContext keeps for its kNN metrics."""
    rng = np.random.default_rng(0)
    for trial in range(40):
        labels = rng.integers(0, 6, size=rng.integers(2, 14))
        masks = (None, None)
        if trial % 2:
            query = rng.random(len(labels)) < 0.5
            gallery = rng.random(len(labels)) < 0.6
            query[0], gallery[-1] = True, True
            masks = (query, gallery)
        ctx = EvalContext(np.zeros((len(labels), 1), np.float32), labels,
                          **({} if masks[0] is None else {"query_mask": masks[0], "gallery_mask": masks[1]}))
        expected = np.unique(ctx.query_labels[ctx.knn_queries])
        assert np.array_equal(query_classes(labels, *masks), expected), (labels, masks)


# ------------------------------------------------------------------------------------------------ in a run


class _FewParams(Params):
    test_classes: int = Field(1, ge=1, description="Test classes.")


@hookimpl
def register_datasets(register):
    register("few_test_classes", lambda params, ctx: _bundle(train=(4,) * 8, test=(4,) * params.test_classes),
             params=_FewParams, description="Eight training classes and few test classes.")


def test_a_run_refuses_the_split_before_the_sampler_and_the_model(monkeypatch):
    import types

    from dmlplug.engine import build as engine
    from dmlplug.testing import load_host
    from tests.shared.recipes import load_recipe

    plugin = types.ModuleType("few_datasets")
    plugin.register_datasets = register_datasets
    host = load_host(plugin)
    recipe = load_recipe(
        {"data": {"dataset": {"name": "few_test_classes"}, "batch_size": 8}, "backbone": {"name": "timm"},
         "loss": {"name": "multi_similarity"}}, registry=host.registry)  # the dataset declares no split sizes
    built = []
    monkeypatch.setattr(engine, "build_component", lambda spec, ctx: built.append(spec.path) or spec.build(ctx))
    with pytest.raises(DataError, match="the test split of the dataset has 1 class with a query"):
        engine.check_data(recipe, engine.new_context(recipe, device="cpu", host=host))
    assert built == ["data.dataset"]
    recipe.components["data.dataset"].params.test_classes = 2
    assert engine.check_data(recipe, engine.new_context(recipe, device="cpu", host=host))["train_classes"] == 8


def test_the_recipes_class_lists_are_checked_and_named():
    from dmlplug.engine import build as engine
    from dmlplug.testing import load_host
    from tests.shared.recipes import load_recipe

    @hookimpl
    def register_one_image_class(register):
        register("one_image_class", lambda params, ctx: _bundle(train=(4,) * 8, test=(4, 1)),
                 description="Eight training classes; two test classes, one of a single image.")

    plugin = types.ModuleType("one_image_class_datasets")
    plugin.register_datasets = register_one_image_class
    host = load_host(plugin)
    recipe = load_recipe(
        {"data": {"dataset": {"name": "one_image_class"}, "batch_size": 8,
                  "train_classes": [f"train{i}" for i in range(8)], "test_classes": ["test0", "test1"]},
         "backbone": {"name": "timm"}, "loss": {"name": "multi_similarity"}}, registry=host.registry)
    with pytest.raises(DataError, match="the test split of the dataset has 1 class with a query") as info:
        engine.check_data(recipe, engine.new_context(recipe, device="cpu", host=host))
    assert info.value.where.startswith("[data] train_classes")


# ------------------------------------------------------------------------------------------------ sampler warning


@pytest.mark.parametrize(("name", "params"), [("m_per_class", {"m": 4}), ("class_random", {"k": 4}),
                                              ("hierarchical", {"m": 4, "super_classes_per_batch": 2})])
def test_a_sampler_warns_when_a_class_has_fewer_images_than_it_takes(caplog, name, params):
    def sampler(sizes):
        labels = np.repeat(np.arange(len(sizes)), sizes).astype(np.int64)
        ctx = make_context(train_labels=labels, batch_size=16, train_super_labels=labels % 2)
        with caplog.at_level(logging.WARNING, logger="dmlplug.samplers"):
            return build("samplers", name, ctx, **params)

    sampler([4, 5, 6, 7, 8, 9])
    assert caplog.text == ""
    sampler([4, 2, 6, 3, 8, 9])
    assert f"sampler {name!r} takes" in caplog.text and "2 of the 6 training classes have fewer (the smallest 2)" \
        in caplog.text


# ------------------------------------------------------------------------------------------------ the kit


def _declaring(split_sizes):
    import types

    class Declaring(Params):
        def split_sizes(self):
            return split_sizes

    @hookimpl
    def register_datasets(register):
        register("declaring", lambda params, ctx: _bundle(train=(3, 3, 3), test=(2, 4)), params=Declaring)

    plugin = types.ModuleType("declaring_datasets")
    plugin.register_datasets = register_datasets
    return plugin


def test_the_kit_compares_declared_split_sizes_with_the_built_splits():
    from dmlplug.params import SplitSize
    from dmlplug.testing import ContractError, check_plugin

    check_plugin(_declaring({"train": SplitSize(3, 3), "test": SplitSize(2, 2)}))
    check_plugin(_declaring({"train": SplitSize(3), "test": SplitSize(2)}))  # images unknown: not compared
    with pytest.raises(ContractError, match=r"declares test = .*classes=3.*has 2 classes, the smallest with 2"):
        check_plugin(_declaring({"train": SplitSize(3, 3), "test": SplitSize(3, 2)}))
    with pytest.raises(ContractError, match=r"the smallest with 2 images"):
        check_plugin(_declaring({"train": SplitSize(3, 3), "test": SplitSize(2, 4)}))
    with pytest.raises(ContractError, match=r"declares the splits \['test', 'train', 'val'\]"):
        check_plugin(_declaring({"train": SplitSize(3), "test": SplitSize(2), "val": SplitSize(2)}))
