"""Throwaway plugins: one per registration hook, each registering one tiny component with every documented
keyword of ``register``, plus a plugin that records every lifecycle hook call.

They use only the public API (docs/plugin-api.md), like a third-party plugin would. Every factory records the
``(params, ctx)`` it was called with (a copy of the context as it was then: the engine keeps filling it).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

import dmlplug
from dmlplug import Params
from dmlplug.context import BuildContext
from dmlplug.data import ArraySource, DatasetBundle
from dmlplug.protocols import RunView

IMAGE_SIZE = 16


def fresh_host(*plugins: tuple[Any, str]) -> Any:
    """A freshly loaded plugin host (built-ins only, no entry points) with ``plugins`` added.

    Tests may use the host's private modules; the throwaway plugins themselves do not.
    """
    from dmlplug.plugins import PluginHost

    host = PluginHost().load(entry_points=False)
    for plugin, name in plugins:
        host.add_plugin(plugin, name)
        assert host.records[name].error is None, host.records[name].error
    return host


class RegisteringPlugin:
    """A plugin registering one component of ``kind``; records the ``register`` callbacks and factory calls."""

    kind = ""
    hook = ""
    name = ""
    params: type[Params] | None = None
    tags: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.registers: list[Any] = []
        self.built: list[tuple[Any, BuildContext, Any]] = []

    @property
    def alias(self) -> str:
        """The alias every throwaway component is registered under too."""
        return f"{self.name}_alias"

    @property
    def description(self) -> str:
        """The description given to ``register``."""
        return f"Throwaway {self.kind[:-1]} of tests/hooks."

    def _register(self, register: Any) -> None:
        self.registers.append(register)
        register(self.name, self.factory, params=self.params, description=self.description, aliases=(self.alias,),
                 tags=self.tags, requires=self.requires)

    def factory(self, params: Any, ctx: Any) -> Any:
        """Build the component, recording the call."""
        component = self.make(params, ctx)
        self.built.append((params, copy.copy(ctx), component))
        return component

    def make(self, params: Any, ctx: Any) -> Any:  # pragma: no cover - overridden
        """Build the component."""
        raise NotImplementedError


# ------------------------------------------------------------------------------------------------- datasets


class BlobsParams(Params):
    """Parameters of the throwaway dataset."""

    train_classes: int = Field(8, ge=2, description="Training classes.")
    test_classes: int = Field(4, ge=2, description="Test classes.")
    per_class: int = Field(4, ge=2, description="Images per class.")


def blob_images(classes: int, per_class: int, seed: int) -> tuple[Any, Any]:
    """``classes`` colours with noise: N×16×16×3 uint8 images and their labels."""
    import numpy as np

    rng = np.random.default_rng(seed)
    colours = rng.integers(0, 256, size=(classes, 1, 1, 3))
    labels = np.repeat(np.arange(classes), per_class)
    noise = rng.integers(-40, 41, size=(len(labels), IMAGE_SIZE, IMAGE_SIZE, 3))
    return np.clip(colours[labels] + noise, 0, 255).astype(np.uint8), labels


class DatasetPlugin(RegisteringPlugin):
    """``register_datasets``."""

    kind, hook, name, params, tags = "datasets", "register_datasets", "hooks_blobs", BlobsParams, ("hooks_data",)

    @dmlplug.hookimpl
    def register_datasets(self, register):
        self._register(register)

    def make(self, params, ctx):
        train = ArraySource(*blob_images(params.train_classes, params.per_class, 0),
                            [f"c{i}" for i in range(params.train_classes)], name="hooks_blobs/train")
        test = ArraySource(*blob_images(params.test_classes, params.per_class, 1),
                           [f"t{i}" for i in range(params.test_classes)], name="hooks_blobs/test")
        return DatasetBundle(train, test, default_augment="none", info={"throwaway": True})


# ------------------------------------------------------------------------------------------------- samplers


class ClassPairsParams(Params):
    """Parameters of the throwaway sampler."""

    m: int = Field(2, ge=1, description="Samples per class in a batch.")


class ClassPairsSampler:
    """``batch_size // m`` random classes, ``m`` samples each; a function of ``(seed, epoch)`` only."""

    def __init__(self, labels: Any, batch_size: int, m: int, seed: int):
        import numpy as np

        self.labels = np.asarray(labels)
        self.batch_size, self.m, self.seed, self.epoch = batch_size, m, seed, 0
        self.classes = np.unique(self.labels)
        self.set_epoch_calls: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (the engine calls it before every epoch)."""
        self.epoch = int(epoch)
        self.set_epoch_calls.append(self.epoch)

    def __len__(self) -> int:
        return len(self.labels) // self.batch_size

    def __iter__(self):
        import numpy as np

        rng = np.random.default_rng([self.seed, self.epoch])
        for _ in range(len(self)):
            batch = []
            for c in rng.choice(self.classes, self.batch_size // self.m, replace=False):
                members = np.flatnonzero(self.labels == c)
                batch += [int(i) for i in rng.choice(members, self.m, replace=len(members) < self.m)]
            yield batch


class SamplerPlugin(RegisteringPlugin):
    """``register_samplers``."""

    kind, hook, name, params, tags = "samplers", "register_samplers", "hooks_class_pairs", ClassPairsParams, (
        "equal_class_counts",)

    @dmlplug.hookimpl
    def register_samplers(self, register):
        self._register(register)

    def make(self, params, ctx):
        return ClassPairsSampler(ctx.train_labels, ctx.batch_size, params.m, ctx.seed)


# ------------------------------------------------------------------------------------------------- model


class ConvParams(Params):
    """Parameters of the throwaway backbone."""

    channels: int = Field(8, ge=1, description="Output channels = pooled feature size.")


def make_conv(channels: int) -> Any:
    """One 3×3 convolution, ReLU and mean pooling (a torch module)."""
    from torch import nn

    class TinyConv(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, channels, 3, padding=1)
            self.num_features = channels

        def forward(self, images):
            fmap = self.conv(images).relu()
            return fmap.mean((2, 3)), fmap

    return TinyConv()


class BackbonePlugin(RegisteringPlugin):
    """``register_backbones``."""

    kind, hook, name, params, tags = "backbones", "register_backbones", "hooks_conv", ConvParams, ("feature_map",)

    @dmlplug.hookimpl
    def register_backbones(self, register):
        self._register(register)

    def make(self, params, ctx):
        return make_conv(params.channels)


class LinearParams(Params):
    """Parameters of the throwaway head."""

    embedding_size: int = Field(8, ge=1, description="Embedding size.")


class HeadPlugin(RegisteringPlugin):
    """``register_heads``."""

    kind, hook, name, params = "heads", "register_heads", "hooks_linear", LinearParams

    @dmlplug.hookimpl
    def register_heads(self, register):
        self._register(register)

    def make(self, params, ctx):
        from torch import nn

        head = nn.Linear(ctx.feature_dim, params.embedding_size)
        head.embedding_size = params.embedding_size
        return head


# ------------------------------------------------------------------------------------------------- training terms


class PairLossParams(Params):
    """Parameters of the throwaway loss."""

    margin: float = Field(0.5, description="Negative pairs are pushed below this cosine.")


def pair_loss(margin: float) -> Any:
    """Contrastive loss over the (mined, else all) pairs of the batch."""
    import torch
    from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

    class PairLoss(torch.nn.Module):
        def forward(self, embeddings, labels, indices_tuple=None):
            if indices_tuple is None:
                indices_tuple = lmu.get_all_pairs_indices(labels)
            a1, p, a2, n = lmu.convert_to_pairs(indices_tuple, labels)
            pos = (1 - (embeddings[a1] * embeddings[p]).sum(1)) if len(a1) else embeddings.sum()[None] * 0
            neg = ((embeddings[a2] * embeddings[n]).sum(1) - margin).relu() if len(a2) else embeddings.sum()[None] * 0
            return pos.mean() + neg.mean()

    return PairLoss()


class LossPlugin(RegisteringPlugin):
    """``register_losses``."""

    kind, hook, name, params, tags = "losses", "register_losses", "hooks_pairs", PairLossParams, ("uses_tuples",)

    @dmlplug.hookimpl
    def register_losses(self, register):
        self._register(register)

    def make(self, params, ctx):
        return pair_loss(params.margin)


class MinerPlugin(RegisteringPlugin):
    """``register_miners`` (no params: ``params=None`` registers a component without parameters)."""

    kind, hook, name, tags = "miners", "register_miners", "hooks_all_pairs", ("pairs",)

    @dmlplug.hookimpl
    def register_miners(self, register):
        self._register(register)

    def make(self, params, ctx):
        def all_pairs(embeddings, labels):
            from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

            return lmu.get_all_pairs_indices(labels)

        return all_pairs


class FeatureNormParams(Params):
    """Parameters of the throwaway regularizer."""

    target: float = Field(1.0, ge=0, description="Target mean squared feature value.")
    nan_at_step: int = Field(0, ge=0, description="Return NaN at this step (0: never), to make a run fail.")


def feature_norm(target: float, nan_at_step: int) -> Any:
    """``(mean(features²) - target)²``: a term that needs the engine service ``features``."""
    import torch

    class FeatureNorm(torch.nn.Module):
        def forward(self, step):
            term = (step.features.pow(2).mean() - target) ** 2
            return term * float("nan") if step.step == nan_at_step else term

    return FeatureNorm()


class RegularizerPlugin(RegisteringPlugin):
    """``register_regularizers``."""

    kind, hook, name, params, requires = ("regularizers", "register_regularizers", "hooks_feature_norm",
                                          FeatureNormParams, ("features",))

    @dmlplug.hookimpl
    def register_regularizers(self, register):
        self._register(register)

    def make(self, params, ctx):
        return feature_norm(params.target, params.nan_at_step)


# ------------------------------------------------------------------------------------------------- evaluation, logging


class NearestParams(Params):
    """Parameters of the throwaway evaluator."""

    prefix: str = Field("hooks", description="Metric name prefix.")

    def metric_names(self) -> tuple[str, ...]:
        """The one metric :class:`NearestLabelAgreement` returns."""
        return (f"{self.prefix}/nn_agreement",)


class NearestLabelAgreement:
    """Share of items whose nearest other item has the same label (a leave-one-out recall@1, by brute force)."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.contexts: list[Any] = []

    def evaluate(self, eval_context):
        """``{"<prefix>/nn_agreement": share}``."""
        import numpy as np

        self.contexts.append(eval_context)
        x = np.asarray(eval_context.embeddings, dtype=np.float64)
        distances = ((x[:, None] - x[None]) ** 2).sum(-1)
        np.fill_diagonal(distances, np.inf)
        labels = np.asarray(eval_context.labels)
        return {f"{self.prefix}/nn_agreement": float((labels[distances.argmin(1)] == labels).mean())}


class EvaluatorPlugin(RegisteringPlugin):
    """``register_evaluators``."""

    kind, hook, name, params = "evaluators", "register_evaluators", "hooks_nn_agreement", NearestParams

    @dmlplug.hookimpl
    def register_evaluators(self, register):
        self._register(register)

    def make(self, params, ctx):
        return NearestLabelAgreement(params.prefix)


class EchoParams(Params):
    """Parameters of the throwaway logger."""

    tag: str = Field("echo", description="Written into every record.")


class EchoLogger:
    """A logger: hears the lifecycle hooks of its own run only."""

    def __init__(self, tag: str):
        self.tag = tag
        self.heard: list[str] = []

    @dmlplug.hookimpl
    def on_run_start(self, run):
        self.heard.append("on_run_start")

    @dmlplug.hookimpl
    def on_step_end(self, run, step, losses):
        self.heard.append("on_step_end")

    @dmlplug.hookimpl
    def on_run_end(self, run, status, error):
        self.heard.append("on_run_end")


class LoggerPlugin(RegisteringPlugin):
    """``register_loggers``."""

    kind, hook, name, params = "loggers", "register_loggers", "hooks_echo", EchoParams

    @dmlplug.hookimpl
    def register_loggers(self, register):
        self._register(register)

    def make(self, params, ctx):
        return EchoLogger(params.tag)


REGISTERING = (DatasetPlugin, SamplerPlugin, BackbonePlugin, HeadPlugin, LossPlugin, MinerPlugin, RegularizerPlugin,
               EvaluatorPlugin, LoggerPlugin)

# ------------------------------------------------------------------------------------------------- lifecycle


@dataclass
class Call:
    """One lifecycle hook call, with what the run view showed at that moment."""

    hook: str
    run: Any
    kwargs: dict[str, Any]
    is_run_view: bool
    epoch: int
    step: int
    components: list[str] = field(default_factory=list)
    learning_rates: dict[str, float] = field(default_factory=dict)
    latest_metrics: dict[str, float] = field(default_factory=dict)
    path_existed: bool | None = None


class Recorder:
    """Implements every lifecycle hook and records each call."""

    def __init__(self) -> None:
        self.calls: list[Call] = []

    def _record(self, hook: str, run: Any, **kwargs: Any) -> None:
        path = kwargs.get("path")
        self.calls.append(Call(
            hook, run, kwargs, isinstance(run, RunView), run.epoch, run.step, sorted(run.components),
            dict(run.learning_rates), dict(run.latest_metrics),
            Path(path).is_file() if path is not None else None))

    def of(self, hook: str) -> list[Call]:
        """The calls of one hook, in order."""
        return [c for c in self.calls if c.hook == hook]

    @dmlplug.hookimpl
    def on_run_start(self, run):
        self._record("on_run_start", run)

    @dmlplug.hookimpl
    def on_epoch_start(self, run, epoch):
        self._record("on_epoch_start", run, epoch=epoch)

    @dmlplug.hookimpl
    def on_step_end(self, run, step, losses):
        self._record("on_step_end", run, step=step, losses=dict(losses))

    @dmlplug.hookimpl
    def on_eval_end(self, run, epoch, split, metrics):
        self._record("on_eval_end", run, epoch=epoch, split=split, metrics=dict(metrics))

    @dmlplug.hookimpl
    def on_checkpoint(self, run, path):
        self._record("on_checkpoint", run, path=path)

    @dmlplug.hookimpl
    def on_run_end(self, run, status, error):
        self._record("on_run_end", run, status=status, error=error)


#: The recipe of the one run all hook tests share: every component is a throwaway one.
RECIPE = """
[run]
name = "hooks"
epochs = 2
seed = 3
checkpoint_every_steps = 1
[data]
batch_size = 8
eval_batch_size = 64
image_size = 16
[data.dataset]
name = "hooks_blobs"
per_class = 4
[data.sampler]
name = "hooks_class_pairs"
m = 2
[backbone]
name = "hooks_conv"
[head]
name = "hooks_linear_alias"
embedding_size = 8
[loss]
name = "hooks_pairs"
margin = 0.3
[miner]
name = "hooks_all_pairs"
[[regularizers]]
name = "hooks_feature_norm"
weight = 0.1
[optimizer]
lr = 1e-3
[evaluation]
metric = "hooks/nn_agreement"
[[evaluators]]
name = "hooks_nn_agreement"
[[loggers]]
name = "hooks_echo"
tag = "from-recipe"
"""


def recorded_run(host, plugins, folder, overrides=(), recorder_name="hooks_recorder"):
    """Train the throwaway recipe in ``folder`` with a :class:`Recorder` registered on ``host``.

    Returns:
        ``(result, recorder, builds)``: the run's result, what the hooks recorded, and what each throwaway
        plugin of ``plugins`` built (copied before other tests build more).
    """
    import torch

    from dmlplug.engine.launch import run_recipe

    recorder = Recorder()
    host.add_plugin(recorder, recorder_name)
    recipe = folder / "hooks.toml"
    recipe.write_text(RECIPE)
    for plugin in plugins.values():
        plugin.built.clear()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is faster on shared cores
    try:
        result = run_recipe(recipe, list(overrides), out=folder / "run", quiet=True, host=host, device="cpu")
    finally:
        torch.set_num_threads(threads)
        host.pm.unregister(recorder)
    return result, recorder, {kind: list(plugin.built) for kind, plugin in plugins.items()}
