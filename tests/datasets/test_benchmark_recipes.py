"""The benchmark recipes: the paper protocol, and a [data.dataset] section that builds from a tiny tree."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

RECIPES = Path(__file__).resolve().parents[2] / "recipes"

# recipe -> (dataset name, embedding size, epochs)
BENCHMARKS = {
    "cub_margin.toml": ("cub200", 128, 150),
    "cars_multisimilarity.toml": ("cars196", 128, 150),
    "sop_arcface.toml": ("sop", 512, 100),
}


def _load(name):
    with open(RECIPES / name, "rb") as handle:
        return tomllib.load(handle)


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_recipe_follows_the_paper_protocol(name):
    recipe = _load(name)
    _, embedding_size, epochs = BENCHMARKS[name]
    assert recipe["run"]["name"] == name.removesuffix(".toml") and recipe["run"]["epochs"] == epochs
    assert recipe["data"]["batch_size"] == 112 and recipe["data"]["image_size"] == 224
    assert recipe["data"]["sampler"] == {"name": "class_random", "k": 2}
    backbone = recipe["backbone"]
    # torchvision's ImageNet ResNet-50 as timm tags it, fetched into the Hugging Face cache (never by validate).
    assert backbone["model"] == "resnet50.tv_in1k" and backbone["frozen_bn"] is True
    assert backbone["pretrained"] is True
    assert recipe["head"]["embedding_size"] == embedding_size
    assert recipe["optimizer"]["name"] == "adam"
    assert (recipe["optimizer"]["lr"], recipe["optimizer"]["weight_decay"]) == (1e-5, 4e-4)
    assert recipe["data"]["dataset"]["root"].startswith("${DMLPLUG_DATA}/")


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_dataset_section_validates_against_the_loader(build, name):
    from dmlplug.registry import Registry
    from dmlplug_builtins.datasets import register_datasets

    dataset = dict(_load(name)["data"]["dataset"])
    assert dataset["name"] == BENCHMARKS[name][0]
    registry = Registry()
    register_datasets(registry.register_callback("datasets", "builtin"))
    registry.get("datasets", dataset.pop("name")).validate(dataset, where="data.dataset")


@pytest.mark.parametrize(("name", "make"), [("cub_margin.toml", "make_cub"), ("sop_arcface.toml", "make_sop")])
def test_dataset_section_builds_from_DMLPLUG_DATA(build, trees, tmp_path, monkeypatch, name, make):
    getattr(trees, make)(tmp_path)
    monkeypatch.setenv("DMLPLUG_DATA", str(tmp_path))
    dataset = dict(_load(name)["data"]["dataset"])
    bundle = build(dataset.pop("name"), **dataset)
    assert len(bundle.train) > 0 and len(bundle.test) > 0
    assert bundle.info["root"].startswith(str(tmp_path))
