"""Contract tests parametrized over the registry: every loss, miner, regularizer, sampler, evaluator, head, logger,
re-ranker, tune sampler and pruner … builds from its defaults on a tiny context and behaves; and the checks catch
broken components.

The checks themselves live in :mod:`dmlplug.testing`, where plugin authors use them for their own components;
a component registered tomorrow is tested here automatically. A component that needs context the checks
cannot provide fails with a message naming the requirement (nothing is skipped). The nested distance / reducer
/ PML regularizer tables are tested in tests/builtins/pml, the samplers' class coverage in tests/builtins/samplers.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import Field

from dmlplug import Params, hookimpl
from dmlplug.testing import ContractError, check_component, check_plugin, load_host

HOST = load_host()

#: Extra arguments of the checks for built-ins that need more than the defaults.
OPTIONS = {
    "regularizers.diva": {"head": {"name": "multi", "heads": {"discriminative": 16, "shared": 8,
                                                              "selfsimilarity": 8, "intra": 8}}},
}


@pytest.mark.parametrize(("kind", "name"), [
    (kind, name) for kind in ("losses", "miners", "regularizers", "samplers", "evaluators", "heads", "loggers",
                              "distances", "reducers", "optimizers", "lr_schedules", "augmentations", "rerankers",
                              "tune_samplers", "tune_pruners", "index_codecs")
    for name in HOST.registry.names(kind)
])
def test_builtin_component_passes_its_contract(kind, name, seeded):
    check_component(kind, name, host=HOST, **OPTIONS.get(f"{kind}.{name}", {}))


# -------------------------------------------------------------------------------------------------- the checks fail


class _Margin(Params):
    margin: float = Field(0.2, description="Margin.")


def _plugin(name: str, **hooks):
    import types

    module = types.ModuleType(name)
    for hook, function in hooks.items():
        setattr(module, hook, hookimpl(function))
    return module


def _loss_plugin(forward, tags=()):
    def build_loss(params, ctx):
        class Loss(torch.nn.Module):
            def forward(self, embeddings, labels, indices_tuple=None):
                return forward(embeddings, labels, indices_tuple)

        return Loss()

    def register_losses(register):
        register("probe_loss", build_loss, params=_Margin, tags=tags)

    return _plugin("probe_losses", register_losses=register_losses)


def _pair_hinge(embeddings, labels, indices_tuple=None):
    d = torch.cdist(embeddings, embeddings)
    same = labels[:, None] == labels[None]
    return (d[same].mean() + torch.relu(1 - d[~same]).mean())


def test_check_plugin_passes_a_correct_plugin():
    assert check_plugin(_loss_plugin(_pair_hinge)) == [("losses", "probe_loss")]


@pytest.mark.parametrize(("forward", "tags", "message"), [
    (lambda e, y, t=None: _pair_hinge(e, y) * float("nan"), (), "finite scalar"),
    (lambda e, y, t=None: e.sum(1), (), "finite scalar"),
    (lambda e, y, t=None: _pair_hinge(e.detach(), y) + torch.zeros((), requires_grad=True), (), "no gradient"),
    (_pair_hinge, ("uses_tuples",), "uses_tuples"),
    (lambda e, y, t=None: _pair_hinge(e, y) + (0 if t is None else 0.1 * len(t[0])), (), "uses_tuples"),
    (_pair_hinge, ("has_parameters",), "has_parameters"),
])
def test_loss_check_catches_broken_losses(forward, tags, message):
    with pytest.raises(ContractError, match=message):
        check_plugin(_loss_plugin(forward, tags))


def test_miner_check_catches_invalid_pairs():
    def build_miner(params, ctx):
        def mine(embeddings, labels):
            idx = torch.arange(len(labels))
            return idx, idx.roll(1), idx, idx  # negatives that are the anchor itself
        return mine

    def register_miners(register):
        register("probe_miner", build_miner, tags=("pairs",))

    with pytest.raises(ContractError, match="invalid positive pairs|invalid negative pairs"):
        check_plugin(_plugin("probe_miners", register_miners=register_miners))


def test_sampler_check_catches_unseeded_batches():
    def build_sampler(params, ctx):
        class Unseeded:
            def __len__(self):
                return len(ctx.train_labels) // ctx.batch_size

            def set_epoch(self, epoch):
                pass

            def __iter__(self):
                order = np.random.permutation(len(ctx.train_labels))  # ignores (seed, epoch)
                return iter([[int(i) for i in order[b * 16:(b + 1) * 16]] for b in range(len(self))])

        return Unseeded()

    def register_samplers(register):
        register("probe_sampler", build_sampler)

    with pytest.raises(ContractError, match="same batches"):
        check_plugin(_plugin("probe_samplers", register_samplers=register_samplers))


def test_check_plugin_reports_a_plugin_that_fails_to_register():
    def register_losses(register):
        raise RuntimeError("boom")

    with pytest.raises(ContractError, match="boom"):
        check_plugin(_plugin("probe_broken", register_losses=register_losses))


def test_example_third_party_plugin_passes_the_kit(monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "examples" / "dmlplug-example-loss"))
    assert check_plugin("dmlplug_example_loss") == [("losses", "example_cosine_contrastive")]


# ------------------------------------------------------------------------------------------------- declarations


def _wrapped_glyphs(params_class_body: dict, **register_options):
    """A plugin whose dataset is the built-in glyphs with some Params methods replaced (wrong declarations)."""
    glyphs = HOST.registry.get("datasets", "glyphs")
    params = type("WrongGlyphsParams", (glyphs.params,), params_class_body)

    def register_datasets(register):
        register("probe_glyphs", glyphs.factory, params=params, **register_options)

    return _plugin("probe_datasets", register_datasets=register_datasets)


def test_check_dataset_passes_the_embedded_glyphs():
    check_component("datasets", "glyphs", host=HOST, params={"num_classes": 27, "images_per_class": 4,
                                                             "val_fraction": 0.2})


def test_a_wrong_validation_split_declaration_fails_the_kit():
    plugin = _wrapped_glyphs({"has_validation_split": lambda self: False})
    with pytest.raises(ContractError, match=r"has_validation_split\(\) says False, but the built dataset has val"):
        check_plugin(plugin, **{"datasets.probe_glyphs": {"params": {"num_classes": 27, "images_per_class": 4,
                                                                     "val_fraction": 0.2}}})


def test_a_validation_parameter_that_is_no_parameter_fails_the_kit():
    # issue 41: `dmlplug validate` advises --set data.dataset.<it>=0.25; a name that is no parameter misleads.
    plugin = _wrapped_glyphs({"validation_parameter": lambda self: "val_share"})
    with pytest.raises(ContractError, match=r"validation_parameter\(\) names 'val_share'"):
        check_plugin(plugin, **{"datasets.probe_glyphs": {"params": {"num_classes": 27, "images_per_class": 4}}})


def test_a_wrong_tag_fails_the_dataset_kit():
    plugin = _wrapped_glyphs({}, tags=("super_labels",))
    with pytest.raises(ContractError, match="tagged super_labels"):
        check_plugin(plugin, **{"datasets.probe_glyphs": {"params": {"num_classes": 27, "images_per_class": 4}}})


def test_undeclared_optimizer_groups_fail_the_kit():
    class TwoGroups(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Parameter(torch.ones(1)), torch.nn.Parameter(torch.ones(1))

        def forward(self, embeddings, labels, indices_tuple=None):
            return (embeddings.sum() * 0 + self.a + self.b).squeeze()

        def optimizer_param_groups(self):
            return [{"name": "a_group", "params": [self.a]}, {"name": "b_group", "params": [self.b]}]

    class DeclaresOne(Params):
        def optimizer_group_names(self, section):
            return ("a_group",)

    def register_losses(register):
        register("probe_groups", lambda params, ctx: TwoGroups(), params=DeclaresOne, tags=("has_parameters",))

    with pytest.raises(ContractError, match=r"builds optimizer group\(s\) \['b_group'\]"):
        check_plugin(_plugin("probe_group_losses", register_losses=register_losses))


def test_head_outputs_must_match_the_declaration():
    multi = HOST.registry.get("heads", "multi")
    params = type("SilentMultiParams", (multi.params,), {"head_outputs": lambda self: ()})

    def register_heads(register):
        register("probe_multi", multi.factory, params=params)

    with pytest.raises(ContractError, match=r"returns named embeddings \['discriminative'"):
        check_plugin(_plugin("probe_heads", register_heads=register_heads))
