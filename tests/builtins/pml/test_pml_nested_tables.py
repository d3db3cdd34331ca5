"""Nested tables of PML losses and miners: every distance, reducer and PML regularizer table builds and works,
nested tables resolve in the registry of the host that validates and builds them, and a third-party distance or
reducer is accepted by every PML loss and miner."""

from __future__ import annotations

import types

import pytest
import torch
from pydantic import Field, ValidationError

from dmlplug import ComponentTable, Params, hookimpl
from dmlplug.errors import RecipeError
from dmlplug.testing import batch_labels, build, load_host, make_context
from dmlplug_builtins.pml import MultipleLossesParams
from dmlplug_builtins.pml.catalog import DISTANCES, REDUCERS, REGULARIZERS


def _random_embeddings(batch: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    raw = torch.randn(batch, 16, requires_grad=True)
    return raw, torch.nn.functional.normalize(raw, dim=1)


def _assert_finite_grads(tensors) -> int:
    count = 0
    for t in tensors:
        if t.grad is not None:
            assert torch.isfinite(t.grad).all(), "non-finite gradient"
            count += 1
    return count


@pytest.mark.parametrize("spec", DISTANCES, ids=lambda s: s.name)
def test_every_distance_table_builds_and_is_finite(spec, seeded):
    distance = build("distances", spec.name)
    _, embeddings = _random_embeddings()
    assert torch.isfinite(distance(embeddings)).all()
    # The same table works nested in a miner that accepts any distance.
    assert build("miners", "multi_similarity", distance={"name": spec.aliases[0]}) is not None


def _reducer_table(spec) -> dict:
    if spec.name == "multiple":
        return {"name": "multiple", "reducers": {"pos_loss": {"name": "sum"}}, "default_reducer": {"name": "mean"}}
    if spec.name == "per_anchor":
        return {"name": "per_anchor", "reducer": {"name": "sum"}}
    if spec.name == "class_weighted":
        return {"name": "class_weighted", "weights": [1.0, 2.0] * 4}  # one per class of the tiny context
    return {"name": spec.name}


@pytest.mark.parametrize("spec", REDUCERS, ids=lambda s: s.name)
def test_every_reducer_table_reduces_a_loss(spec, seeded):
    # DivisorReducer divides by a count the loss must supply: PML's margin loss does.
    loss_name = "pml_margin" if spec.name == "divisor" else "contrastive"
    loss = build("losses", loss_name, reducer=_reducer_table(spec))
    raw, embeddings = _random_embeddings()
    value = loss(embeddings, batch_labels())
    if spec.name == "do_nothing":
        assert isinstance(value, dict) and set(value) == {"pos_loss", "neg_loss"}
        return
    assert value.dim() == 0 and torch.isfinite(value)
    value.backward()
    assert _assert_finite_grads([raw]) == 1


@pytest.mark.parametrize("spec", REGULARIZERS, ids=lambda s: s.name)
def test_every_pml_regularizer_table_nests_in_a_loss(spec, seeded):
    if "embeddings" in spec.tags:
        loss = build("losses", "contrastive", embedding_regularizer={"name": spec.name}, embedding_reg_weight=0.5)
    else:
        loss = build("losses", "soft_triple", centers_per_class=3, weight_regularizer={"name": spec.name})
    raw, embeddings = _random_embeddings()
    value = loss(embeddings, batch_labels())
    assert torch.isfinite(value)
    value.backward()
    assert _assert_finite_grads([raw, *loss.parameters()]) >= 1


# -------------------------------------------------------------------------------------------------- nested components


class _Doubled(torch.nn.Module):
    """A loss only the probe plugin below registers: twice the contrastive loss."""

    def __init__(self):
        super().__init__()
        from pytorch_metric_learning.losses import ContrastiveLoss

        self.inner = ContrastiveLoss()

    def forward(self, embeddings, labels, indices_tuple=None):
        return 2 * self.inner(embeddings, labels, indices_tuple)


def _probe_host():
    """The built-ins plus a plugin that registers loss 'doubled_contrastive'."""

    def register_losses(register):
        register("doubled_contrastive", lambda params, ctx: _Doubled(), tags=("uses_tuples",))

    module = types.ModuleType("probe_nested")
    module.register_losses = hookimpl(register_losses)
    return load_host(module)


def test_nested_tables_resolve_in_the_registry_that_validates_them(seeded):
    host = _probe_host()
    info = host.registry.get("losses", "multiple_losses")
    table = {"losses": [{"name": "doubled_contrastive"}, {"name": "contrastive"}], "weights": [1.0, 1.0]}
    params = info.validate(table, where="loss", registry=host.registry)
    # The default host does not know the probe's loss: the name is checked against the registry handed over.
    with pytest.raises(RecipeError, match="doubled_contrastive"):
        info.validate(table, where="loss", registry=load_host().registry)
    # Built through ctx.build, i.e. the registry of the host the context belongs to.
    loss = info.build(params, make_context(host))
    assert isinstance(loss.losses[0], _Doubled)
    embeddings = torch.nn.functional.normalize(torch.randn(32, 16), dim=1)
    labels = batch_labels()
    expected = 3 * loss.losses[1](embeddings, labels)
    assert loss(embeddings, labels).item() == pytest.approx(expected.item(), rel=1e-5)


def test_without_a_registry_a_nested_table_is_a_clear_error_not_another_registry():
    # A bare model_validate (no validation context) has no registry to resolve names in: no process-wide fallback.
    with pytest.raises(ValidationError, match="validated without a registry"):
        MultipleLossesParams.model_validate({"losses": [{"name": "contrastive_loss", "pos_margin": 0.1}]})
    registry = load_host().registry
    params = MultipleLossesParams.model_validate({"losses": [{"name": "contrastive_loss", "pos_margin": 0.1}]},
                                                 context={"registry": registry})
    (table,) = params.losses
    assert isinstance(table, ComponentTable) and table.name == "contrastive" and table.params.pos_margin == 0.1
    with pytest.raises(ValidationError, match="not_registered_anywhere"):
        MultipleLossesParams.model_validate({"losses": [{"name": "not_registered_anywhere"}]},
                                            context={"registry": registry})
    with pytest.raises(ValidationError, match="needs a `name`"):
        MultipleLossesParams.model_validate({"losses": [{"margin": 0.1}]})


def test_nested_tables_dump_back_to_canonical_recipe_tables():
    registry = load_host().registry
    info = registry.get("losses", "contrastive")
    params = info.validate({"distance": {"name": "cosine"}, "reducer": {"name": "per_anchor_reducer",
                                                                       "reducer": {"name": "sum"}}}, where="loss",
                           registry=registry)
    dumped = params.model_dump()
    assert dumped["distance"] == {"name": "cosine_similarity", "power": 1.0}
    assert dumped["reducer"] == {"name": "per_anchor", "reducer": {"name": "sum"}}
    assert info.validate({k: v for k, v in dumped.items() if v is not None}, where="loss", registry=registry) == params


def test_composite_reducers_nest_any_reducer(seeded):
    table = {"name": "multiple", "reducers": {"pos_loss": {"name": "per_anchor", "reducer": {"name": "sum"}}}}
    loss = build("losses", "contrastive", reducer=table)
    inner = loss.reducer.reducers["pos_loss"]
    assert type(inner).__name__ == "PerAnchorReducer" and type(inner.reducer).__name__ == "SumReducer"
    _, embeddings = _random_embeddings()
    assert torch.isfinite(loss(embeddings, batch_labels()))


# -------------------------------------------------------------------------------------------------- third-party


class ManhattanParams(Params):
    """Parameters of the probe plugin's distance."""

    scale: float = Field(1.0, gt=0, description="Multiplies every distance.")


def _manhattan(params, ctx):
    from pytorch_metric_learning.distances import BaseDistance

    class Manhattan(BaseDistance):
        def compute_mat(self, query_emb, ref_emb):
            return params.scale * torch.cdist(query_emb, ref_emb, p=1)

        def pairwise_distance(self, query_emb, ref_emb):
            return params.scale * (query_emb - ref_emb).abs().sum(-1)

    return Manhattan(normalize_embeddings=False)


def _top_half_mean(params, ctx):
    from pytorch_metric_learning.reducers import BaseReducer

    class TopHalfMean(BaseReducer):
        def element_reduction(self, losses, loss_indices, embeddings, labels):
            return torch.topk(losses, max(1, len(losses) // 2)).values.mean()

        pos_pair_reduction = neg_pair_reduction = triplet_reduction = element_reduction

    return TopHalfMean()


def _third_party_host():
    module = types.ModuleType("probe_metric")
    module.register_distances = hookimpl(lambda register: register(
        "manhattan", _manhattan, params=ManhattanParams, description="L1 distance.", aliases=("l1",)))
    module.register_reducers = hookimpl(lambda register: register(
        "top_half_mean", _top_half_mean, description="Mean of the larger half of the losses."))
    return load_host(module)


def test_a_third_party_distance_and_reducer_are_accepted_by_pml_losses_and_miners(seeded):
    host = _third_party_host()
    ctx = make_context(host)
    loss = build("losses", "triplet_margin", ctx, distance={"name": "l1", "scale": 2.0},
                 reducer={"name": "top_half_mean"})
    assert type(loss.distance).__name__ == "Manhattan" and loss.distance.is_inverted is False
    miner = build("miners", "batch_hard", ctx, distance={"name": "manhattan"})
    _, embeddings = _random_embeddings()
    labels = batch_labels()
    expected = torch.cdist(embeddings, embeddings, p=1) * 2.0
    assert torch.allclose(loss.distance(embeddings), expected, atol=1e-5)
    value = loss(embeddings, labels, miner(embeddings, labels))
    assert value.dim() == 0 and torch.isfinite(value)
    # nested in a composite reducer, and in a wrapper's inner loss, from a recipe
    nested = {"name": "multiple", "reducers": {"pos_loss": {"name": "top_half_mean"}}}
    assert build("losses", "contrastive", ctx, reducer=nested)(embeddings, labels).dim() == 0
    from dmlplug.recipe import load_recipe

    recipe = {"data": {"dataset": {"name": "glyphs"}, "sampler": {"name": "m_per_class"}}, "backbone": {"name": "timm"},
              "loss": {"name": "cross_batch_memory", "loss": {"name": "contrastive", "distance": {"name": "l1"}}}}
    validated = load_recipe(recipe, registry=host.registry)
    assert validated.components["loss"].params.loss.params.distance.name == "manhattan"
    with pytest.raises(RecipeError, match="scale"):
        host.registry.get("losses", "contrastive").validate({"distance": {"name": "l1", "scale": -1}}, where="loss",
                                                            registry=host.registry)
    # the default host does not know them
    with pytest.raises(RecipeError, match="manhattan"):
        load_host().registry.get("losses", "contrastive").validate({"distance": {"name": "manhattan"}}, where="loss",
                                                                   registry=load_host().registry)
