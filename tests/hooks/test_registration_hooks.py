"""The nine ``register_<kind>`` hooks: each throwaway plugin's hook is called with a ``register`` callback that
takes every documented keyword; the component is then in the registry, buildable through ``BuildContext.build``,
passes the public contract kit where there is one, and is built and used by the shared tiny run."""

from __future__ import annotations

import pytest

from dmlplug import protocols
from dmlplug.context import BuildContext

#: The recipe path of each kind's component in the shared run, and its protocol.
PATHS = {"datasets": "data.dataset", "samplers": "data.sampler", "backbones": "backbone", "heads": "head",
         "losses": "loss", "miners": "miner", "regularizers": "regularizers[0]", "evaluators": "evaluators[0]",
         "loggers": "loggers[0]"}
PROTOCOLS = {"samplers": protocols.BatchSampler, "backbones": protocols.Backbone, "heads": protocols.Head,
             "losses": protocols.Loss, "miners": protocols.Miner, "regularizers": protocols.Regularizer,
             "evaluators": protocols.Evaluator}
#: Kinds dmlplug.testing has a contract check for.
CHECKED = ("samplers", "heads", "losses", "miners", "regularizers", "evaluators", "loggers")


def check_registered(host, registering, kind):
    """The hook was called with a callable ``register``; the registry holds what it was given."""
    plugin = registering[kind]
    assert plugin.registers and all(callable(r) for r in plugin.registers), f"{plugin.hook} was not called"
    info = host.registry.get(kind, plugin.name)
    assert host.registry.get(kind, plugin.alias) is info
    assert (info.name, info.plugin, info.description) == (plugin.name, plugin.name, plugin.description)
    assert info.tags == frozenset(plugin.tags) and info.requires == frozenset(plugin.requires)
    if plugin.params is not None:
        assert info.params is plugin.params
    assert host.records[plugin.name].hooks == [plugin.hook]
    return plugin, info


def check_buildable(host, kind, name, table=None, **ctx_fields):
    """Built through the public nesting API, ``ctx.build(kind, {name = ..., **params})``."""
    import numpy as np

    fields = dict(num_classes=4, embedding_size=8, feature_dim=8, batch_size=8, seed=0, epochs=1,
                  train_labels=np.repeat(np.arange(4), 4))
    fields.update(ctx_fields)
    ctx = BuildContext(host=host, **fields)
    component = ctx.build(kind, {"name": name, **(table or {})})
    if kind in PROTOCOLS:
        assert isinstance(component, PROTOCOLS[kind])
    return component


def check_in_run(hooked_run, kind, ctx_expect):
    """The run built the component from its recipe table, with a context, and shows it in ``run.components``."""
    plugin = hooked_run.registering[kind]
    params, ctx, component = hooked_run.built(kind)
    if plugin.params is not None:
        assert isinstance(params, plugin.params)
    assert isinstance(ctx, BuildContext)
    for field, value in ctx_expect.items():
        assert getattr(ctx, field) == value, (kind, field, getattr(ctx, field))
    run = hooked_run.recorder.of("on_run_start")[0].run
    shown = run.components[PATHS[kind]]
    if kind != "datasets":  # the engine may re-split a dataset by class names ([data] train_classes)
        assert shown is component
    assert hooked_run.result.status == "completed"
    return params, ctx, component


def check_contract(host, kind, name):
    from dmlplug.testing import check_component

    if kind in CHECKED:
        check_component(kind, name, host=host)


# ------------------------------------------------------------------------------------------------- datasets


@pytest.mark.hook("register_datasets")
def test_register_datasets(host, registering):
    plugin, _ = check_registered(host, registering, "datasets")
    bundle = check_buildable(host, "datasets", plugin.alias, {"train_classes": 3})
    assert len(bundle.train) == 12 and bundle.train.num_classes == 3 and bundle.test.num_classes == 4


@pytest.mark.hook("register_datasets")
def test_registered_dataset_feeds_the_run(hooked_run):
    params, _, bundle = check_in_run(hooked_run, "datasets", {"device": "cpu", "seed": 3})
    assert params.per_class == 4
    run = hooked_run.recorder.of("on_run_start")[0].run
    assert run.dataset is bundle or run.dataset.train.labels.tolist() == bundle.train.labels.tolist()


# ------------------------------------------------------------------------------------------------- samplers


@pytest.mark.hook("register_samplers")
def test_register_samplers(host, registering):
    plugin, _ = check_registered(host, registering, "samplers")
    sampler = check_buildable(host, "samplers", plugin.name, {"m": 4})
    assert len(sampler) == 2 and all(len(b) == 8 for b in sampler)
    check_contract(host, "samplers", plugin.name)


@pytest.mark.hook("register_samplers")
def test_registered_sampler_drives_the_run(hooked_run):
    _, ctx, sampler = check_in_run(hooked_run, "samplers", {"batch_size": 8, "seed": 3, "num_classes": 8})
    assert ctx.train_labels.tolist() == sorted(ctx.train_labels.tolist()) and len(ctx.train_labels) == 32
    assert {1, 2} <= set(sampler.set_epoch_calls)  # the engine selects each epoch before iterating it
    assert hooked_run.recorder.of("on_run_start")[0].run.steps_per_epoch == len(sampler) == 4


# ------------------------------------------------------------------------------------------------- backbones, heads


@pytest.mark.hook("register_backbones")
def test_register_backbones(host, registering):
    import torch

    plugin, _ = check_registered(host, registering, "backbones")
    backbone = check_buildable(host, "backbones", plugin.name, {"channels": 5})
    features, fmap = backbone(torch.zeros(2, 3, 8, 8))
    assert backbone.num_features == 5 and features.shape == (2, 5) and fmap.shape == (2, 5, 8, 8)


@pytest.mark.hook("register_backbones")
def test_registered_backbone_is_trained_in_the_run(hooked_run):
    check_in_run(hooked_run, "backbones", {"num_classes": 8, "batch_size": 8, "steps_per_epoch": 4})
    start = hooked_run.recorder.of("on_run_start")[0]
    assert "backbone" in start.learning_rates


@pytest.mark.hook("register_heads")
def test_register_heads(host, registering):
    plugin, _ = check_registered(host, registering, "heads")
    head = check_buildable(host, "heads", plugin.name, {"embedding_size": 6}, feature_dim=5)
    assert head.embedding_size == 6 and head.in_features == 5
    check_contract(host, "heads", plugin.name)


@pytest.mark.hook("register_heads")
def test_registered_head_is_built_after_the_backbone(hooked_run):
    params, _, head = check_in_run(hooked_run, "heads", {"feature_dim": 8})
    assert params.embedding_size == 8 and head.in_features == 8


# ------------------------------------------------------------------------------------------------- training terms


@pytest.mark.hook("register_losses")
def test_register_losses(host, registering):
    plugin, _ = check_registered(host, registering, "losses")
    loss = check_buildable(host, "losses", plugin.name, {"margin": 0.2})
    assert isinstance(loss, protocols.Loss)
    check_contract(host, "losses", plugin.name)


@pytest.mark.hook("register_losses")
def test_registered_loss_trains_the_run(hooked_run):
    params, _, _ = check_in_run(hooked_run, "losses", {"embedding_size": 8, "feature_dim": 8, "num_classes": 8})
    assert params.margin == 0.3
    steps = hooked_run.recorder.of("on_step_end")
    assert steps and all("loss" in c.kwargs["losses"] for c in steps)


@pytest.mark.hook("register_miners")
def test_register_miners(host, registering):
    plugin, info = check_registered(host, registering, "miners")
    assert not info.params.model_fields  # params=None: a component without parameters
    check_buildable(host, "miners", plugin.name)
    check_contract(host, "miners", plugin.name)


@pytest.mark.hook("register_miners")
def test_registered_miner_mines_in_the_run(hooked_run):
    _, ctx, _ = check_in_run(hooked_run, "miners", {"embedding_size": 8})
    assert ctx.loss is hooked_run.built("losses")[2]  # built after the loss, which it feeds


@pytest.mark.hook("register_regularizers")
def test_register_regularizers(host, registering):
    plugin, _ = check_registered(host, registering, "regularizers")
    check_buildable(host, "regularizers", plugin.name, {"target": 0.5})
    check_contract(host, "regularizers", plugin.name)


@pytest.mark.hook("register_regularizers")
def test_registered_regularizer_adds_a_term(hooked_run):
    _, ctx, _ = check_in_run(hooked_run, "regularizers", {"embedding_size": 8})
    assert ctx.loss is hooked_run.built("losses")[2] and ctx.needs is not None and "features" in ctx.needs
    steps = hooked_run.recorder.of("on_step_end")
    assert steps and all("hooks_feature_norm" in c.kwargs["losses"] for c in steps)
    for call in steps:
        losses = call.kwargs["losses"]
        assert losses["total"] == pytest.approx(losses["loss"] + losses["hooks_feature_norm"], rel=1e-5)


# ------------------------------------------------------------------------------------------------- evaluation, logging


@pytest.mark.hook("register_evaluators")
def test_register_evaluators(host, registering):
    import numpy as np

    from dmlplug.evaluation import EvalContext

    plugin, _ = check_registered(host, registering, "evaluators")
    evaluator = check_buildable(host, "evaluators", plugin.name, {"prefix": "x"})
    metrics = evaluator.evaluate(EvalContext(np.eye(4, dtype=np.float32)[[0, 0, 1, 1]], np.array([0, 0, 1, 1])))
    assert metrics == {"x/nn_agreement": 1.0}
    check_contract(host, "evaluators", plugin.name)


@pytest.mark.hook("register_evaluators")
def test_registered_evaluator_selects_the_best_checkpoint(hooked_run):
    _, _, evaluator = check_in_run(hooked_run, "evaluators", {"embedding_size": 8})
    assert len(evaluator.contexts) == 3  # before training and after each of the 2 epochs
    evals = hooked_run.recorder.of("on_eval_end")
    assert [set(c.kwargs["metrics"]) >= {"hooks/nn_agreement"} for c in evals] == [True] * 3
    assert "hooks/nn_agreement" in hooked_run.result.best_metrics


@pytest.mark.hook("register_loggers")
def test_register_loggers(host, registering):
    plugin, _ = check_registered(host, registering, "loggers")
    logger = check_buildable(host, "loggers", plugin.name, {"tag": "t"})
    assert logger.tag == "t"
    check_contract(host, "loggers", plugin.name)


@pytest.mark.hook("register_loggers")
def test_registered_logger_hears_its_run_only(hooked_run):
    params, _, logger = check_in_run(hooked_run, "loggers", {"embedding_size": 8})
    assert params.tag == "from-recipe"
    assert logger.heard[0] == "on_run_start" and logger.heard[-1] == "on_run_end"
    assert logger.heard.count("on_step_end") == 8
    # Registered for its run only: after the run, the host no longer calls it.
    assert all(plugin is not logger for _, plugin in hooked_run.host.pm.list_name_plugin())
