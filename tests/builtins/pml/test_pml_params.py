"""Recipe-facing behaviour of the PML components: names, aliases, nested tables, validation and capabilities."""

from __future__ import annotations

import pytest
import torch

import dmlplug
from dmlplug.errors import ComponentError, RecipeError
from dmlplug.testing import batch_labels, build, load_host, make_context

HOST = load_host()


def test_aliases_resolve_to_the_same_component():
    assert HOST.registry.get("losses", "arc_face_loss").name == "arcface"
    assert HOST.registry.get("losses", "multi_similarity_loss").name == "multi_similarity"
    assert HOST.registry.get("miners", "batch_hard_miner").name == "batch_hard"
    assert HOST.registry.get("miners", "distance_weighted_miner").name == "pml_distance_weighted"


def test_unknown_and_mistyped_keys_are_recipe_errors():
    info = HOST.registry.get("losses", "arcface")
    with pytest.raises(RecipeError, match=r"loss\.margn: unknown key \(did you mean 'margin'"):
        info.validate({"margn": 0.3}, where="loss")
    with pytest.raises(RecipeError, match="num_classes"):
        info.validate({"num_classes": 10}, where="loss")  # comes from the context, never the recipe
    with pytest.raises(RecipeError, match=r"loss\.distance"):
        info.validate({"distance": {"name": "cosinus"}}, where="loss", registry=HOST.registry)
    with pytest.raises(RecipeError, match="powr"):
        info.validate({"distance": {"name": "cosine", "powr": 2}}, where="loss", registry=HOST.registry)


def test_nested_distance_and_reducer_tables_reach_the_pml_object():
    loss = build("losses", "contrastive", distance={"name": "cosine_similarity"}, reducer={"name": "sum"})
    assert type(loss.distance).__name__ == "CosineSimilarity"
    # PML copies the reducer once per sub-loss (pos_loss, neg_loss) of the contrastive loss.
    assert {type(r).__name__ for r in loss.reducer.reducers.values()} == {"SumReducer"}
    miner = build("miners", "triplet_margin", distance={"name": "lp", "power": 2.0}, margin=0.1)
    assert miner.distance.power == 2.0 and miner.margin == 0.1


def test_incompatible_nested_distance_is_a_component_error():
    with pytest.raises(ComponentError, match="arcface"):
        build("losses", "arcface", distance={"name": "lp_distance"})


def test_nested_loss_tables_are_validated_against_the_registry():
    info = HOST.registry.get("losses", "cross_batch_memory")
    with pytest.raises(RecipeError, match="contrastiv"):
        info.validate({"loss": {"name": "contrastiv"}}, where="loss", registry=HOST.registry)
    with pytest.raises(RecipeError, match="pos_margn"):
        info.validate({"loss": {"name": "contrastive", "pos_margn": 0.1}}, where="loss", registry=HOST.registry)
    multiple = HOST.registry.get("losses", "multiple_losses")
    with pytest.raises(RecipeError, match="weights has 1 entries for 2 losses"):
        multiple.validate({"losses": [{"name": "contrastive"}, {"name": "arcface"}], "weights": [1.0]}, where="loss",
                          registry=HOST.registry)


def test_multiple_losses_with_per_loss_miners(seeded):
    loss = build("losses", "multiple_losses", losses=[{"name": "triplet_margin"}, {"name": "arcface"}],
                 miners=[{"name": "batch_hard"}, {}], weights=[1.0, 0.5])
    embeddings = torch.nn.functional.normalize(torch.randn(32, 16), dim=1)
    labels = batch_labels()
    expected = (loss.losses[0](embeddings, labels, loss.miners[0](embeddings, labels))
                + 0.5 * loss.losses[1](embeddings, labels))
    assert loss(embeddings, labels).item() == pytest.approx(expected.item(), rel=1e-6)


def test_context_values_are_read_from_the_context():
    loss = build("losses", "proxy_anchor", make_context(num_classes=5, embedding_size=7))
    assert tuple(loss.proxies.shape) == (5, 7)
    with pytest.raises(ComponentError, match="needs num_classes"):
        build("losses", "arcface", make_context(num_classes=None))


def test_dmlplug_create_builds_by_name():
    loss = dmlplug.create("loss", "sub_center_arcface", num_classes=4, embedding_size=8, sub_centers=2)
    assert tuple(loss.W.shape) == (8, 8)


def test_create_builds_registered_components_by_kind_and_name():
    loss = dmlplug.create("loss", "arcface", num_classes=5, embedding_size=8)
    assert loss.W.shape == (8, 5)
    miner = dmlplug.create("miners", "batch_hard")
    assert miner is not None


def test_proxy_regularizers_need_a_proxy_loss():
    from pytorch_metric_learning.losses import ContrastiveLoss

    with pytest.raises(ComponentError, match="has none"):
        build("regularizers", "regular_face", make_context(loss=ContrastiveLoss()))
    assert "loss:proxies" in HOST.registry.get("regularizers", "regular_face").requires
    assert "loss:sub_centers" in HOST.registry.get("regularizers", "sparse_centers").requires


def _recipe(loss, miner=None, sampler="m_per_class"):
    recipe = {"data": {"dataset": {"name": "glyphs"}, "sampler": {"name": sampler}},
              "backbone": {"name": "timm"}, "loss": {"name": loss}}
    if miner:
        recipe["miner"] = {"name": miner}
    return recipe


def test_validation_rejects_a_miner_with_a_loss_that_ignores_tuples():
    from dmlplug.errors import RecipeError
    from dmlplug.recipe import load_recipe

    load_recipe(_recipe("triplet_margin", "batch_hard"), registry=HOST.registry)
    load_recipe(_recipe("ranked_list"), registry=HOST.registry)
    with pytest.raises(RecipeError, match="ranked_list.*ignores mined tuples"):
        load_recipe(_recipe("ranked_list", "batch_hard"), registry=HOST.registry)


def test_validation_requires_equal_class_counts_for_smooth_ap():
    from dmlplug.errors import RecipeError
    from dmlplug.recipe import load_recipe

    load_recipe(_recipe("smooth_ap", sampler="m_per_class"), registry=HOST.registry)
    with pytest.raises(RecipeError, match="equal_class_counts"):
        load_recipe(_recipe("smooth_ap", sampler="class_random"), registry=HOST.registry)
