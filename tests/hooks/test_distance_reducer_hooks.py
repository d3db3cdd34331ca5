"""``register_distances`` and ``register_reducers``: a throwaway plugin's distance and reducer (PML ``BaseDistance`` /
``BaseReducer`` subclasses, as a third-party plugin would write them) are in the registry, buildable through
``BuildContext.build``, and used by the built-in PML losses and miners when a recipe names them in a nested table."""

from __future__ import annotations

import numpy as np
import pytest
import throwaway
from pydantic import Field

import dmlplug
from dmlplug import Params, protocols
from dmlplug.context import BuildContext


class ChebyshevParams(Params):
    """Parameters of the throwaway distance."""

    scale: float = Field(1.0, gt=0, description="Multiplies every distance.")


class ThrowawayMetricPlugin:
    """Registers distance ``hooks_chebyshev`` and reducer ``hooks_max``, recording the ``register`` callbacks."""

    def __init__(self) -> None:
        self.registers: dict[str, list] = {"distances": [], "reducers": []}
        self.built: list[tuple[str, Params, BuildContext]] = []

    @dmlplug.hookimpl
    def register_distances(self, register):
        self.registers["distances"].append(register)
        register("hooks_chebyshev", self.chebyshev, params=ChebyshevParams, description="Throwaway L-inf distance.",
                 aliases=("hooks_chebyshev_alias",), tags=("hooks_metric",), requires=())

    @dmlplug.hookimpl
    def register_reducers(self, register):
        self.registers["reducers"].append(register)
        register("hooks_max", self.max_reducer, description="Throwaway reducer: the largest loss.",
                 aliases=("hooks_max_alias",))

    def chebyshev(self, params: ChebyshevParams, ctx: BuildContext):
        import torch
        from pytorch_metric_learning.distances import BaseDistance

        scale = params.scale

        class Chebyshev(BaseDistance):
            def compute_mat(self, query_emb, ref_emb):
                return scale * torch.cdist(query_emb, ref_emb, p=float("inf"))

            def pairwise_distance(self, query_emb, ref_emb):
                return scale * (query_emb - ref_emb).abs().amax(-1)

        self.built.append(("distances", params, ctx))
        return Chebyshev(normalize_embeddings=False)

    def max_reducer(self, params: Params, ctx: BuildContext):
        from pytorch_metric_learning.reducers import BaseReducer

        class MaxReducer(BaseReducer):
            def element_reduction(self, losses, loss_indices, embeddings, labels):
                return losses.max()

            pos_pair_reduction = neg_pair_reduction = triplet_reduction = element_reduction

        self.built.append(("reducers", params, ctx))
        return MaxReducer()


@pytest.fixture(scope="module")
def metric_plugin():
    return ThrowawayMetricPlugin()


@pytest.fixture(scope="module")
def metric_host(metric_plugin):
    return throwaway.fresh_host((metric_plugin, "hooks_metric"))


def _recipe(loss: dict, miner: dict | None = None) -> dict:
    recipe = {"data": {"dataset": {"name": "glyphs"}, "sampler": {"name": "m_per_class"}},
              "backbone": {"name": "timm"}, "loss": loss}
    if miner is not None:
        recipe["miner"] = miner
    return recipe


def _context(host) -> BuildContext:
    return BuildContext(host=host, num_classes=4, embedding_size=8, feature_dim=8, batch_size=16, seed=0, epochs=1,
                        train_labels=np.repeat(np.arange(4), 4))


def _batch():
    import torch

    generator = torch.Generator().manual_seed(0)
    embeddings = torch.nn.functional.normalize(torch.randn(16, 8, generator=generator), dim=1)
    return embeddings, torch.arange(4).repeat_interleave(4)


@pytest.mark.hook("register_distances")
def test_register_distances(metric_host, metric_plugin):
    import torch

    (register,) = metric_plugin.registers["distances"]
    assert callable(register)
    info = metric_host.registry.get("distances", "hooks_chebyshev_alias")
    assert (info.name, info.plugin) == ("hooks_chebyshev", "hooks_metric")
    assert info.description == "Throwaway L-inf distance."
    assert info.params is ChebyshevParams and info.tags == frozenset({"hooks_metric"})
    distance = _context(metric_host).build("distance", {"name": "hooks_chebyshev", "scale": 2.0})
    assert isinstance(distance, protocols.Distance) and distance.is_inverted is False
    embeddings, _ = _batch()
    expected = 2.0 * (embeddings[:, None] - embeddings[None]).abs().amax(-1)
    assert torch.allclose(distance(embeddings), expected, atol=1e-6)


@pytest.mark.hook("register_distances")
def test_a_registered_distance_is_used_by_pml_losses_and_miners_from_a_recipe(metric_host, metric_plugin):
    from tests.shared.recipes import load_recipe

    recipe = _recipe({"name": "contrastive", "distance": {"name": "hooks_chebyshev_alias", "scale": 0.5}},
                     {"name": "batch_hard", "distance": {"name": "hooks_chebyshev"}})
    validated = load_recipe(recipe, registry=metric_host.registry)
    ctx = _context(metric_host)
    metric_plugin.built.clear()
    loss = validated.components["loss"].build(ctx)
    miner = validated.components["miner"].build(ctx)
    assert type(loss.distance).__name__ == type(miner.distance).__name__ == "Chebyshev"
    (kind, params, built_ctx), _ = metric_plugin.built
    assert kind == "distances" and params.scale == 0.5 and built_ctx.num_classes == 4
    assert "hooks_chebyshev" in built_ctx.building  # the context names the component being built
    embeddings, labels = _batch()
    value = loss(embeddings, labels, miner(embeddings, labels))
    assert value.dim() == 0 and bool(value.isfinite())
    # the resolved recipe names the canonical distance; an unknown one is rejected with its path
    assert validated.components["loss"].params.distance.name == "hooks_chebyshev"
    with pytest.raises(dmlplug.errors.RecipeError, match=r"loss\.distance"):
        load_recipe(_recipe({"name": "contrastive", "distance": {"name": "hooks_chebyshew"}}),
                    registry=metric_host.registry)


@pytest.mark.hook("register_reducers")
def test_register_reducers(metric_host, metric_plugin):
    (register,) = metric_plugin.registers["reducers"]
    assert callable(register)
    info = metric_host.registry.get("reducers", "hooks_max_alias")
    assert (info.name, info.plugin) == ("hooks_max", "hooks_metric") and not info.params.model_fields
    reducer = _context(metric_host).build("reducers", {"name": "hooks_max"})
    assert isinstance(reducer, protocols.Reducer)


@pytest.mark.hook("register_reducers")
def test_a_registered_reducer_is_used_by_a_pml_loss_from_a_recipe(metric_host):
    from tests.shared.recipes import load_recipe

    recipe = _recipe({"name": "triplet_margin", "reducer": {"name": "hooks_max_alias"}})
    loss = load_recipe(recipe, registry=metric_host.registry).components["loss"].build(_context(metric_host))
    embeddings, labels = _batch()
    per_triplet = load_recipe(_recipe({"name": "triplet_margin", "reducer": {"name": "do_nothing"}}),
                              registry=metric_host.registry).components["loss"].build(_context(metric_host))
    expected = per_triplet(embeddings, labels)["loss"]["losses"].max()
    assert loss(embeddings, labels).item() == pytest.approx(expected.item())
    # nested in a built-in composite reducer too
    nested = {"name": "multiple", "reducers": {"loss": {"name": "hooks_max"}}}
    loss = load_recipe(_recipe({"name": "triplet_margin", "reducer": nested}),
                       registry=metric_host.registry).components["loss"].build(_context(metric_host))
    assert loss(embeddings, labels).item() == pytest.approx(expected.item())
