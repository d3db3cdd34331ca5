"""``register_optimizers``, ``register_lr_schedules`` and ``register_augmentations``: a third-party plugin's
optimizer, learning-rate schedule and augmentation policy are registered, validated and used by a recipe exactly
as the built-ins are (``[optimizer] name``, ``[scheduler] name``, ``[data] augment``).

The shared run of tests/hooks trains the built-in ones; these throwaway plugins get a run of their own (the
throwaway data and model of :mod:`throwaway`, 2 epochs of 4 steps).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
import throwaway
from pydantic import Field

import dmlplug
from dmlplug import Params
from dmlplug.context import BuildContext
from dmlplug.protocols import Augmentation, LRSchedule, Optimizer

# ------------------------------------------------------------------------------------------------- plugins


class DampenedParams(Params):
    """Parameters of the throwaway optimizer."""

    dampening: float = Field(0.0, ge=0, lt=1, description="SGD dampening of the momentum.")


class OptimizerPlugin(throwaway.RegisteringPlugin):
    """``register_optimizers``: SGD with momentum 0.5 and a dampening."""

    kind, hook, name, params = "optimizers", "register_optimizers", "hooks_dampened_sgd", DampenedParams

    @dmlplug.hookimpl
    def register_optimizers(self, register):
        self._register(register)

    def make(self, params, ctx):
        import torch

        groups = ctx.require("param_groups")
        self.given = [(g["name"], g["lr"], g["weight_decay"]) for g in groups]  # torch then owns (and changes) them
        return torch.optim.SGD(groups, momentum=0.5, dampening=params.dampening)


class HalvingParams(Params):
    """Parameters of the throwaway schedule."""

    every: int = Field(1, ge=1, description="Halve every learning rate every N epochs.")


class HalvingSchedule:
    """Halves the learning rates every ``every`` epochs; remembers the metrics it was stepped with."""

    def __init__(self, optimizer: Any, every: int):
        self.optimizer, self.every = optimizer, every
        self.epochs, self.metrics = 0, []

    def step_epoch(self, metric):
        self.epochs += 1
        self.metrics.append(metric)
        if self.epochs % self.every == 0:
            for group in self.optimizer.param_groups:
                group["lr"] /= 2

    def state_dict(self):
        return {"epochs": self.epochs, "metrics": list(self.metrics)}

    def load_state_dict(self, state_dict):
        self.epochs, self.metrics = state_dict["epochs"], list(state_dict["metrics"])


class SchedulePlugin(throwaway.RegisteringPlugin):
    """``register_lr_schedules``."""

    kind, hook, name, params = "lr_schedules", "register_lr_schedules", "hooks_halving", HalvingParams

    @dmlplug.hookimpl
    def register_lr_schedules(self, register):
        self._register(register)

    def make(self, params, ctx):
        return HalvingSchedule(ctx.require("optimizer"), params.every)


class JitterParams(Params):
    """Parameters of the throwaway augmentation."""

    noise: float = Field(0.1, ge=0, description="Standard deviation of the Gaussian noise added to the image.")


@dataclass
class Jitter:
    """Resize to S×S, normalise, add Gaussian noise (drawn from torch's generator, which the engine seeds)."""

    size: int
    noise: float
    calls: int = 0
    eval_crop: bool = False  # evaluation resizes to a square, as the training images
    inputs: set = field(default_factory=set)  # the types of the images it was given

    def __post_init__(self):
        from torchvision.transforms import v2

        from dmlplug.data.transforms import normalized_pipeline

        self.base = normalized_pipeline([v2.Resize((self.size, self.size), antialias=True)])

    def __call__(self, image):
        import torch

        self.calls += 1
        self.inputs.add(type(image).__module__.split(".")[0])
        x = self.base(image)
        return x + self.noise * torch.randn_like(x)


class AugmentationPlugin(throwaway.RegisteringPlugin):
    """``register_augmentations``."""

    kind, hook, name, params = "augmentations", "register_augmentations", "hooks_jitter", JitterParams

    @dmlplug.hookimpl
    def register_augmentations(self, register):
        self._register(register)

    def make(self, params, ctx):
        return Jitter(ctx.require("image_size"), params.noise)


PLUGINS = (OptimizerPlugin, SchedulePlugin, AugmentationPlugin)


class DeclaredNearestParams(throwaway.NearestParams):
    """The throwaway evaluator's parameters, declaring its metric for ``[evaluation] metric``."""

    def metric_names(self) -> tuple[str, ...]:
        return (f"{self.prefix}/nn_agreement",)


class DeclaredEvaluatorPlugin(throwaway.EvaluatorPlugin):
    """The throwaway evaluator, with :class:`DeclaredNearestParams`."""

    params = DeclaredNearestParams

#: The throwaway recipe, trained with the throwaway optimizer, schedule and augmentation.
OVERRIDES = ['optimizer.name="hooks_dampened_sgd_alias"', "optimizer.dampening=0.25", "optimizer.lr=0.01",
             "optimizer.groups.head.lr_mult=2.0", 'scheduler.name="hooks_halving"', "scheduler.every=1",
             'data.augment={name = "hooks_jitter", noise = 0.01}', "run.checkpoint_every_steps=4"]


@pytest.fixture(scope="module")
def plugins():
    return {cls.kind: cls() for cls in PLUGINS}


@pytest.fixture(scope="module")
def training_host(plugins):
    registering = [DeclaredEvaluatorPlugin if cls is throwaway.EvaluatorPlugin else cls
                   for cls in throwaway.REGISTERING]
    extra = [(cls(), cls.name) for cls in registering]
    return throwaway.fresh_host(*extra, *((plugin, plugin.name) for plugin in plugins.values()))


@dataclass
class TrainedRun:
    result: Any
    directory: Any
    recorder: throwaway.Recorder
    builds: dict[str, list[tuple[Any, Any, Any]]]
    given: list[tuple[str, float, float]]


@pytest.fixture(scope="module")
def trained(training_host, plugins, tmp_path_factory):
    folder = tmp_path_factory.mktemp("training_kinds")
    result, recorder, builds = throwaway.recorded_run(training_host, plugins, folder, OVERRIDES,
                                                      "training_kinds_recorder")
    return TrainedRun(result, folder / "run", recorder, builds, plugins["optimizers"].given)


def _check_registered(host, plugin):
    assert plugin.registers and all(callable(r) for r in plugin.registers), f"{plugin.hook} was not called"
    info = host.registry.get(plugin.kind, plugin.name)
    assert host.registry.get(plugin.kind, plugin.alias) is info
    assert (info.name, info.plugin, info.description, info.params) == (
        plugin.name, plugin.name, plugin.description, plugin.params)
    assert host.records[plugin.name].hooks == [plugin.hook]


def _built_once(trained, kind):
    calls = trained.builds[kind]
    assert len(calls) == 1, f"the run built the throwaway {kind} {len(calls)} times"
    assert trained.result.status == "completed"
    return calls[0]


# ------------------------------------------------------------------------------------------------- optimizers


def _groups():
    import torch

    return [{"name": "a", "params": [torch.nn.Parameter(torch.zeros(2))], "lr": 0.1, "weight_decay": 0.0}]


@pytest.mark.hook("register_optimizers")
def test_register_optimizers(training_host, plugins):
    plugin = plugins["optimizers"]
    _check_registered(training_host, plugin)
    optimizer = BuildContext(host=training_host, param_groups=_groups()).build(
        "optimizer", {"name": plugin.alias, "dampening": 0.5})
    assert isinstance(optimizer, Optimizer) and optimizer.param_groups[0]["dampening"] == 0.5


@pytest.mark.hook("register_optimizers")
def test_registered_optimizer_trains_the_run(trained):
    params, ctx, optimizer = _built_once(trained, "optimizers")
    assert params.dampening == 0.25
    # the engine's groups, with [optimizer] lr and [optimizer.groups.head] applied
    assert trained.given == [("backbone", 0.01, 0.0), ("head", 0.02, 0.0)]
    assert [g["name"] for g in ctx.param_groups] == ["backbone", "head"]
    assert [g["dampening"] for g in optimizer.param_groups] == [0.25, 0.25]
    start = trained.recorder.of("on_run_start")[0]
    assert start.learning_rates == {"backbone": 0.01, "head": 0.02}


# ------------------------------------------------------------------------------------------------- schedules


@pytest.mark.hook("register_lr_schedules")
def test_register_lr_schedules(training_host, plugins):
    import torch

    plugin = plugins["lr_schedules"]
    _check_registered(training_host, plugin)
    optimizer = torch.optim.SGD(_groups())
    schedule = BuildContext(host=training_host, optimizer=optimizer, epochs=3).build(
        "lr_schedule", {"name": plugin.name, "every": 2})
    assert isinstance(schedule, LRSchedule)
    schedule.step_epoch(0.5)
    schedule.step_epoch(None)
    assert optimizer.param_groups[0]["lr"] == 0.05 and schedule.metrics == [0.5, None]


@pytest.mark.hook("register_lr_schedules")
def test_registered_schedule_is_stepped_every_epoch_with_the_selection_metric(trained):
    import torch

    _, ctx, schedule = _built_once(trained, "lr_schedules")
    _, _, optimizer = trained.builds["optimizers"][0]
    assert ctx.optimizer is optimizer and ctx.epochs == 2
    # After each epoch, with the selection metric; this run has no validation classes, so no split selects
    # (best.pt is the last epoch's model) and a schedule is handed no metric: the test split never steers
    # training (test_selection.py checks the validation metric reaching a schedule that needs it).
    assert json.loads((trained.directory / "results.json").read_text())["selected_on"] == "last"
    assert schedule.metrics == [None, None]
    rates = [c.learning_rates["backbone"] for c in trained.recorder.of("on_epoch_start")]
    assert rates == pytest.approx([0.01, 0.005])
    # checkpointed through the protocol's state_dict
    state = torch.load(trained.directory / "checkpoints" / "last.pt", map_location="cpu", weights_only=False)
    assert state["scheduler"] == {"epochs": 2, "metrics": schedule.metrics}


# ------------------------------------------------------------------------------------------------- augmentations


@pytest.mark.hook("register_augmentations")
def test_register_augmentations(training_host, plugins):
    import numpy as np

    plugin = plugins["augmentations"]
    _check_registered(training_host, plugin)
    jitter = BuildContext(host=training_host, image_size=8).build("augmentation", {"name": plugin.name, "noise": 0})
    assert isinstance(jitter, Augmentation)
    from PIL import Image

    assert tuple(jitter(Image.fromarray(np.zeros((5, 7, 3), dtype=np.uint8))).shape) == (3, 8, 8)


@pytest.mark.hook("register_augmentations")
def test_registered_augmentation_transforms_the_training_images(trained):
    import tomllib

    params, ctx, jitter = _built_once(trained, "augmentations")
    assert params.noise == 0.01 and ctx.image_size == 16
    assert jitter.calls == 2 * 4 * 8  # every training sample of 2 epochs of 4 batches of 8 (no loader workers)
    # it declares no tensor_input, so it got PIL images although the source could hand it tensors
    run = trained.recorder.of("on_run_start")[0].run
    assert jitter.inputs == {"PIL"} and hasattr(run.dataset.train, "load_tensor")
    # evaluation stays the engine's: here a square resize, as the policy's eval_crop asks
    steps = [type(step).__name__ for step in run.test_transform.transforms]
    assert steps == ["ToImage", "Resize", "ToDtype", "Normalize", "ToPureTensor"]
    resolved = tomllib.loads((trained.directory / "recipe.resolved.toml").read_text())
    assert resolved["data"]["augment"] == {"name": "hooks_jitter", "noise": 0.01}
    assert resolved["optimizer"] == {"name": "hooks_dampened_sgd", "lr": 0.01, "weight_decay": 0.0,
                                     "groups": {"head": {"lr_mult": 2.0}}, "dampening": 0.25}
    assert resolved["scheduler"] == {"name": "hooks_halving", "every": 1}


# ------------------------------------------------------------------------------------------------- validation


@pytest.mark.hook("register_optimizers")
@pytest.mark.hook("register_lr_schedules")
@pytest.mark.hook("register_augmentations")
def test_the_registered_names_and_parameters_are_validated(training_host):
    import tomllib

    from dmlplug.errors import ComponentError, RecipeError
    from dmlplug.recipe import load_recipe

    raw = tomllib.loads(throwaway.RECIPE)

    def fails(override, error, *needles):
        with pytest.raises(error) as info:
            load_recipe(raw, [override], registry=training_host.registry)
        text = str(info.value)
        assert all(needle in text for needle in needles), text

    fails('optimizer.name="hooks_dampened_sdg"', ComponentError, "optimizer.name",
          "did you mean 'hooks_dampened_sgd'")
    fails('scheduler.name="hooks_halvin"', ComponentError, "scheduler.name", "did you mean 'hooks_halving'")
    fails('data.augment="hooks_jiter"', ComponentError, "data.augment", "did you mean 'hooks_jitter'")
    fails('data.augment={name="hooks_jitter", nois=1}', RecipeError, "data.augment.nois", "unknown key")
    fails('optimizer.momentum=0.9', RecipeError, "optimizer.momentum", "unknown key")
    fails('optimizer.dampening=1.5', RecipeError, "optimizer.dampening")
    fails('scheduler.evrey=2', RecipeError, "scheduler.evrey", "unknown key")
