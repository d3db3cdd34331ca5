"""Engine services for components with extra needs: extra views, the EMA model, after-step calls,
checkpointed component state, ``requires`` enforcement at validation, and ``[loss] embedding``."""

from __future__ import annotations

import copy
import tomllib

import pytest
import torch
from e2e import TINY_RECIPE
from pydantic import Field

from dmlplug import Params
from dmlplug.engine.data import TransformedSource, split_views
from dmlplug.engine.model import ema_update, make_ema_copy
from dmlplug.errors import RecipeError
from dmlplug.plugins import PluginHost
from dmlplug.recipe import load_recipe


def _tiny(**changes) -> dict:
    recipe = tomllib.loads(TINY_RECIPE)
    recipe["loggers"] = []
    for key, value in changes.items():
        recipe[key] = value
    return recipe


class ProbeParams(Params):
    """Parameters of the probe regularizer."""

    needs: list[str] = Field(default_factory=list, description="Requirements added by the parameters.")


class Probe(torch.nn.Module):
    """Records what the engine hands it; its term is a small differentiable value."""

    ema_momentum = 0.75

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))  # checkpointed state
        self.steps: list = []
        self.after: list[int] = []

    def forward(self, step):
        self.steps.append(step)
        self.calls += 1
        return 0.0 * step.embeddings.sum()

    def after_optimizer_step(self, step) -> None:
        self.after.append(step.step)


def _host(requires=(), name="probe") -> tuple[PluginHost, list[Probe]]:
    host = PluginHost().load(entry_points=False)
    built: list[Probe] = []

    class _Params(ProbeParams):
        def extra_requires(self):
            return tuple(self.needs)

    def factory(params, ctx):
        built.append(Probe())
        return built[-1]

    host.registry.register_callback("regularizers", "test")(name, factory, params=_Params, requires=requires)
    return host, built


# ---------------------------------------------------------------------------------------------- maths


def test_ema_update_follows_the_formula_and_copies_buffers():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    ema = make_ema_copy(model)
    assert type(ema) is type(model) and all(not p.requires_grad for p in ema.parameters())
    before = [p.detach().clone() for p in ema.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
        model[1].running_mean.fill_(3.0)
    ema_update(ema, model, 0.9)
    for old, new, cur in zip(before, ema.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(new, 0.9 * old + 0.1 * cur.detach())
    assert torch.equal(ema[1].running_mean, torch.full((2,), 3.0))
    ema_update(ema, model, 0.0)  # momentum 0: a plain copy
    for new, cur in zip(ema.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(new, cur.detach())


def test_multi_view_items_stack_and_split_in_order():
    from dmlplug.data.transforms import MultiView

    class Source:
        labels = [0, 1]

        def __len__(self):
            return 2

        def load_image(self, index):
            return torch.full((1, 2, 2), float(index))

    dataset = TransformedSource(Source(), MultiView([lambda x: x, lambda x: x + 10, lambda x: x + 20]))
    batch = torch.stack([dataset[0][0], dataset[1][0]])
    assert batch.shape == (2, 3, 1, 2, 2)
    first, views = split_views(batch)
    assert first[:, 0, 0, 0].tolist() == [0.0, 1.0]
    assert [v[:, 0, 0, 0].tolist() for v in views] == [[10.0, 11.0], [20.0, 21.0]]
    plain, none = split_views(first)
    assert plain is first and none == []


# ---------------------------------------------------------------------------------------------- validation


def test_validate_collects_engine_needs_from_requires_and_params():
    host, _ = _host(requires=("features", "views:3"))
    recipe = load_recipe(_tiny(regularizers=[{"name": "probe", "needs": ["ema"]}]), registry=host.registry)
    needs = recipe.needs
    assert needs.views == 3 and "ema" in needs and "features" in needs and "feature_map" not in needs
    assert needs.by["ema"] == ["regularizers[0]"]


def test_validate_rejects_a_feature_map_the_backbone_cannot_give():
    host, _ = _host(requires=("feature_map",))
    raw = _tiny(regularizers=[{"name": "probe"}])
    load_recipe(raw, registry=host.registry)  # resnet10t has a spatial map
    raw["backbone"] = {"name": "timm", "model": "vit_tiny_patch16_224"}
    with pytest.raises(RecipeError, match="feature map") as info:
        load_recipe(raw, registry=host.registry)
    assert "regularizers[0]" in str(info.value)


def test_validate_rejects_named_embeddings_without_a_multi_head():
    host, _ = _host(requires=("named_embeddings",))
    raw = _tiny(regularizers=[{"name": "probe"}])
    with pytest.raises(RecipeError, match="named embeddings"):
        load_recipe(raw, registry=host.registry)
    raw["head"] = {"name": "multi", "heads": {"a": 8, "b": 8}}
    load_recipe(raw, registry=host.registry)


@pytest.mark.parametrize("bad", ["teleport", "views:two", "views:0"])
def test_validate_rejects_unknown_or_malformed_engine_requirements(bad):
    host, _ = _host(requires=(bad,))
    with pytest.raises(RecipeError, match="probe"):
        load_recipe(_tiny(regularizers=[{"name": "probe"}]), registry=host.registry)


def test_loss_embedding_must_name_a_head_output():
    host = PluginHost().load(entry_points=False)
    raw = _tiny()
    raw["loss"] = {"name": "multi_similarity", "embedding": "a"}
    with pytest.raises(RecipeError, match="is not an output of head .linear."):
        load_recipe(raw, registry=host.registry)
    raw["head"] = {"name": "multi", "heads": {"a": 8, "b": 8}}
    assert load_recipe(raw, registry=host.registry).components["loss"].options.embedding == "a"
    raw["loss"]["embedding"] = "c"
    with pytest.raises(RecipeError, match="not an output"):
        load_recipe(raw, registry=host.registry)
    raw["loss"]["embedding"] = 3
    with pytest.raises(RecipeError, match="loss.embedding: Input should be a valid string"):
        load_recipe(raw, registry=host.registry)


# ---------------------------------------------------------------------------------------------- runtime


def test_run_provides_views_ema_features_and_after_step_calls(tmp_path):
    from dmlplug.engine.launch import run_recipe

    host, built = _host(requires=("features", "feature_map", "views:2", "ema"))
    raw = _tiny(regularizers=[{"name": "probe"}])
    raw["run"]["output_dir"] = str(tmp_path)
    raw["evaluation"] = {"initial": False}
    seen_ema: list = []

    # Record the EMA parameters right after each update through the component hook (called after it).
    original = Probe.after_optimizer_step

    def record(self, step):
        original(self, step)
        seen_ema.append([p.detach().clone() for p in step.ema_model.parameters()])

    Probe.after_optimizer_step = record
    try:
        result = run_recipe(raw, host=host)
    finally:
        Probe.after_optimizer_step = original
    probe = built[0]
    assert result.status == "completed" and probe.steps
    first = probe.steps[0]
    assert first.images.shape[1:] == (3, 32, 32) and len(first.views) == 1
    assert first.views[0].shape == first.images.shape and not torch.equal(first.views[0], first.images)
    assert first.features is not None and first.feature_map is not None and first.feature_map.dim() == 4
    ema = first.ema_model
    assert ema is not None and ema is not first.model and type(ema) is type(first.model)
    assert all(not p.requires_grad for p in ema.parameters())
    assert probe.after == [s.step for s in probe.steps]  # one call per optimizer step, in order
    state = torch.load(result.directory / "checkpoints" / "last.pt", weights_only=False)
    assert set(state["ema"]) == set(first.model.state_dict())
    assert int(state["regularizers"]["probe"]["calls"]) == len(probe.steps)
    # EMA maths over the real run: the last update is m * previous + (1 - m) * model.
    model_params = [p.detach() for p in first.model.parameters()]
    for prev, last, cur in zip(seen_ema[-2], seen_ema[-1], model_params, strict=True):
        torch.testing.assert_close(last, 0.75 * prev + 0.25 * cur)


def test_ema_parameters_never_enter_the_optimizer(tmp_path):
    from dmlplug.engine.run import Run
    from dmlplug.recipe import load_recipe as load

    host, built = _host(requires=("ema",))
    raw = _tiny(regularizers=[{"name": "probe"}])
    run = Run(load(raw, registry=host.registry), tmp_path / "r", host, "cpu", quiet=True)
    run.build()
    # A component that holds the EMA copy as a submodule: its frozen parameters stay out of the optimizer.
    built[0].held = run.components.ema_model
    in_optimizer = {id(p) for g in run.optimizer.param_groups for p in g["params"]}
    assert not in_optimizer & {id(p) for p in run.components.ema_model.parameters()}
    assert run.training.ema_momentum == 0.75


def test_loss_and_miner_train_the_named_embedding(tmp_path):
    from dmlplug.engine.run import Run

    host = PluginHost().load(entry_points=False)
    raw = _tiny()
    raw["head"] = {"name": "multi", "heads": {"a": 8, "b": 24}}
    raw["loss"] = {"name": "multi_similarity", "embedding": "b"}
    raw["miner"] = {"name": "multi_similarity"}
    run = Run(load_recipe(raw, registry=host.registry), tmp_path / "r", host, "cpu", quiet=True)
    run.build()
    seen = {}
    c = run.components
    miner = c.miner
    c.loss = lambda emb, labels, tuples: seen.setdefault("loss", (emb, tuples)) and emb.sum() * 0
    c.miner = lambda emb, labels: seen.setdefault("miner", emb) is not None and miner(emb, labels)
    images = torch.randn(8, 3, 32, 32)
    labels = torch.arange(4).repeat_interleave(2)
    run.train_step.forward_terms(images, labels, torch.arange(8), epoch=1, step=1)
    assert seen["loss"][0].shape == (8, 24) and seen["miner"].shape == (8, 24)
    # The evaluation embedding (weighted concatenation) is unchanged: 8 + 24 dims.
    assert run.model(images).embedding.shape == (8, 32)


def test_component_without_ema_momentum_is_rejected_at_build(tmp_path):
    from dmlplug.engine.run import Run
    from dmlplug.errors import RunError

    host, _ = _host(requires=("ema",))
    raw = _tiny(regularizers=[{"name": "probe"}])
    original = Probe.ema_momentum
    Probe.ema_momentum = None
    try:
        run = Run(load_recipe(copy.deepcopy(raw), registry=host.registry), tmp_path / "r", host, "cpu", quiet=True)
        with pytest.raises(RunError, match="ema_momentum"):
            run.build()
    finally:
        Probe.ema_momentum = original
