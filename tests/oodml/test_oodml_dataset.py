"""Dataset ``oodml_split``: a wrapped dataset re-partitioned by one split of a split file (JSON or published .pkl)."""

import pickle
import tomllib
import types

import numpy as np
import pytest
from e2e import TINY_RECIPE

import dmlplug
from dmlplug import hookimpl
from dmlplug.context import BuildContext
from dmlplug.data import ArraySource, DatasetBundle
from dmlplug.data.splits import apply_recipe_classes
from dmlplug.errors import DataError, RecipeError
from dmlplug.testing import load_host
from dmlplug_builtins.oodml.splitfile import OodSplit, SplitFile, save_splits


def toy_bundle():
    """Classes a..f, 3 images each; train a, b, c and test d, e, f."""
    images = np.zeros((18, 4, 4, 3), dtype=np.uint8)
    labels = np.repeat(np.arange(6), 3)
    names = list("abcdef")
    train = ArraySource(images[:9], labels[:9], names[:3], name="toy/train")
    test = ArraySource(images[9:], labels[9:] - 3, names[3:], name="toy/test")
    return DatasetBundle(train=train, test=test, default_augment="light", info={"n": 18})


@hookimpl
def register_datasets(register):
    register("toy", lambda params, ctx: toy_bundle(), description="Six classes of blank images.")


@pytest.fixture(scope="module")
def ctx():
    toy = types.ModuleType("toy_datasets")
    toy.register_datasets = register_datasets
    return BuildContext(host=load_host(toy))


@pytest.fixture
def split_path(tmp_path):
    split = OodSplit(id=2, fid=3.0, train=["a", "b", "c", "d"], test=["e", "f"], split_train=["a", "b", "d"],
                     split_val=["c"], episodes={1: {0: {"e": ["img00000"], "f": ["img00002"]}}})
    return save_splits(tmp_path / "s.json", SplitFile(splits=[split]))


def wrapper(path, split_id=2, **more):
    return {"name": "oodml_split", "split_file": str(path), "split_id": split_id, "dataset": {"name": "toy"}, **more}


def test_zero_shot_and_few_shot_base_parts(ctx, split_path):
    bundle = ctx.build("dataset", wrapper(split_path))
    assert bundle.train.class_names == ["a", "b", "c", "d"] and bundle.test.class_names == ["e", "f"]
    assert bundle.val is None and bundle.info["n"] == 18
    assert bundle.info["oodml_split"] == {"split_file": str(split_path.resolve()), "split_id": 2,
                                          "part": "zero_shot", "fid": 3.0}
    bundle = ctx.build("dataset", wrapper(split_path, part="few_shot_base"))
    assert bundle.train.class_names == ["a", "b", "d"] and bundle.val.class_names == ["c"]
    assert bundle.test.class_names == ["e", "f"]


def test_errors_name_the_split_file_and_id(ctx, split_path, tmp_path):
    with pytest.raises(DataError, match="no split with id 5") as info:
        ctx.build("dataset", wrapper(split_path, split_id=5))
    assert info.value.fix == "use one of [2]" and info.value.where == "data.dataset.split_id"
    with pytest.raises(DataError, match="split file not found"):
        ctx.build("dataset", wrapper(tmp_path / "missing.json"))
    with pytest.raises(DataError, match="published split file not found"):
        ctx.build("dataset", wrapper(tmp_path / "missing.pkl"))
    other = save_splits(tmp_path / "other.json", [OodSplit(id=1, fid=1.0, train=["a", "x"], test=["e"],
                                                           split_train=["a"], split_val=["x"])])
    with pytest.raises(DataError, match="unknown class name 'x'") as info:
        ctx.build("dataset", wrapper(other, split_id=1))
    assert "split_file" in info.value.where
    with pytest.raises(RecipeError, match="split_id"):
        ctx.build("dataset", wrapper(split_path, split_id=0))
    with pytest.raises(RecipeError, match="part"):
        ctx.build("dataset", wrapper(split_path, part="fewshot"))
    with pytest.raises(RecipeError, match="needs a `name`"):
        ctx.build("dataset", {**wrapper(split_path), "dataset": {"root": "x"}})


def test_relative_split_file_is_found_in_the_run_directory(ctx, split_path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path.parent)
    from dataclasses import replace

    bundle = replace(ctx, run_dir=tmp_path).build("dataset", wrapper("s.json"))
    assert bundle.info["oodml_split"]["split_file"] == str(split_path.resolve())


def test_published_pickle_split(ctx, tmp_path):
    def names(text):
        return [np.str_(c) for c in text]

    episodes = {2: {0: {np.str_("e"): names(["img00000", "img00001"]), np.str_("f"): names(["img00001",
                                                                                               "img00002"])}}}
    published = {4: {"train": names("abcd"), "test": names("ef"), "fid": np.float64(12.5),
                      "split_train": names("acd"), "split_val": names("b"), "test_episodes": episodes}}
    path = tmp_path / "toy_splits.pkl"
    path.write_bytes(pickle.dumps(published, protocol=3))
    bundle = ctx.build("dataset", wrapper(path, split_id=4, part="few_shot_base"))
    assert bundle.train.class_names == ["a", "c", "d"] and bundle.val.class_names == ["b"]
    assert bundle.info["oodml_split"]["fid"] == 12.5

    from dmlplug_builtins.oodml.fewshot import stored_episodes

    assert stored_episodes(bundle)[2][0]["f"] == ["img00001", "img00002"]
    assert stored_episodes(toy_bundle()) is None


def test_recipe_form_is_validated_with_the_wrapped_dataset(split_path):
    raw = tomllib.loads(TINY_RECIPE)
    raw["data"]["dataset"] = wrapper(split_path, dataset=raw["data"]["dataset"])
    validated = dmlplug.validate(raw)
    assert validated.recipe.data.dataset["dataset"]["name"] == "glyphs"
    # The wrapped table is checked at validate time, with the path of the bad key.
    with pytest.raises(RecipeError, match="num_classess"):
        dmlplug.validate(raw, ["data.dataset.dataset.num_classess=3"])
    with pytest.raises(RecipeError, match="unknown dataset|glyph"):
        dmlplug.validate(raw, ["data.dataset.dataset.name=glyph"])


def test_wrapped_dataset_capabilities_carry_over(split_path):
    raw = tomllib.loads(TINY_RECIPE)
    raw["data"]["dataset"] = wrapper(split_path, dataset={"name": "sop", "root": "/nowhere"})
    raw["data"]["sampler"] = {"name": "hierarchical"}
    dmlplug.validate(raw)  # hierarchical needs dataset:super_labels, which SOP offers through the wrapper
    raw["data"]["dataset"]["dataset"] = {"name": "glyphs"}
    with pytest.raises(RecipeError, match="super_labels"):
        dmlplug.validate(raw)


def test_recipe_class_lists_still_select_classes():
    from types import SimpleNamespace

    bundle = toy_bundle()
    assert apply_recipe_classes(bundle, SimpleNamespace(train_classes=None)) is bundle
    data = SimpleNamespace(train_classes=["f", "a"], test_classes=["b", "c"], val_classes=["d"])
    selected = apply_recipe_classes(bundle, data)
    assert selected.train.class_names == ["f", "a"] and selected.val.class_names == ["d"]
    unselected = dmlplug.validate(tomllib.loads(TINY_RECIPE)).recipe.data
    assert apply_recipe_classes(toy_bundle(), unselected).train.class_names == ["a", "b", "c"]
