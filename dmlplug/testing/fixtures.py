"""What every contract check starts from: the tiny sizes, a plugin host, a build context, components by name.

Importing this module does not import torch; the functions that need it do.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from dmlplug.context import BuildContext
from dmlplug.plugins import PluginHost

NUM_CLASSES, EMBEDDING_SIZE, PER_CLASS = 8, 16, 4
BATCH = NUM_CLASSES * PER_CLASS
FEATURE_DIM = 24
IMAGE_SIZE = 8


class ContractError(AssertionError):
    """A component breaks its kind's contract."""


def expect(condition: Any, message: str) -> None:
    """Raise :class:`ContractError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise ContractError(message)


_DEFAULT_HOST: PluginHost | None = None


def load_host(*plugins: str | ModuleType | Any, entry_points: bool = False) -> PluginHost:
    """A plugin host with the built-ins and the given plugins (modules, objects or import names).

    Raises:
        ContractError: A given plugin failed to load or to register its components.
    """
    global _DEFAULT_HOST
    if not plugins and not entry_points and _DEFAULT_HOST is not None:
        return _DEFAULT_HOST
    host = PluginHost().load(entry_points=entry_points)
    for plugin in plugins:
        module = importlib.import_module(plugin) if isinstance(plugin, str) else plugin
        name = plugin_name(module)
        host.add_plugin(module, name)
        error = host.records[name].error
        expect(error is None, f"plugin {name!r} failed to load or register: {error}")
    if not plugins and not entry_points:
        _DEFAULT_HOST = host
    return host


def plugin_name(module: ModuleType | Any) -> str:
    """The name a plugin module is registered under: the last part of its import name."""
    return getattr(module, "__name__", repr(module)).rsplit(".", 1)[-1]


def batch_labels() -> Any:
    """32 int64 labels: 4 samples of each of 8 classes, grouped."""
    import torch

    return torch.arange(NUM_CLASSES).repeat_interleave(PER_CLASS)


def make_context(host: PluginHost | None = None, **overrides: Any) -> BuildContext:
    """A tiny build context (8 classes, 16-d embeddings, batch 32, a Proxy-Anchor loss for proxy users)."""
    import numpy as np
    from pytorch_metric_learning.losses import ProxyAnchorLoss

    values: dict[str, Any] = dict(
        num_classes=NUM_CLASSES, embedding_size=EMBEDDING_SIZE, feature_dim=FEATURE_DIM, batch_size=BATCH, epochs=2,
        steps_per_epoch=4, seed=0, host=host or load_host(),
        train_labels=np.repeat(np.arange(NUM_CLASSES), 10).astype(np.int64),
        loss=ProxyAnchorLoss(NUM_CLASSES, EMBEDDING_SIZE))
    values.update(overrides)
    return BuildContext(**values)


def build(kind: str, name: str, ctx: BuildContext | None = None, host: PluginHost | None = None,
          **params: Any) -> Any:
    """Build a registered component from (default) parameters on the tiny context."""
    host = host or (ctx.host if ctx is not None and ctx.host is not None else load_host())
    info = host.registry.get(kind, name)
    params = info.validate(params, where=f"{kind}.{name}", registry=host.registry)
    return info.build(params, ctx or make_context(host))


def random_embeddings(batch: int = BATCH) -> tuple[Any, Any]:
    """``(raw, normalised)``: ``batch × 16`` random embeddings, the raw ones requiring a gradient."""
    import torch

    raw = torch.randn(batch, EMBEDDING_SIZE, requires_grad=True)
    return raw, torch.nn.functional.normalize(raw, dim=1)


def finite_grads(who: str, tensors: Any) -> int:
    """How many of ``tensors`` have a gradient; a ContractError when one of them is not finite."""
    import torch

    count = 0
    for t in tensors:
        if t.grad is not None:
            expect(bool(torch.isfinite(t.grad).all()), f"{who}: non-finite gradient")
            count += 1
    return count


class Declared:
    """A component's registration record with its tags and requirements for the given parameters.

    ``Params`` may add both depending on their values (``extra_tags()`` / ``extra_requires()``).
    """

    def __init__(self, host: PluginHost, kind: str, name: str, params: dict[str, Any] | None = None):
        info = host.registry.get(kind, name)
        self.name, self.kind = info.name, info.kind
        validated = info.validate(params or {}, where=f"{info.kind}.{info.name}", registry=host.registry)
        self.tags = frozenset(info.tags) | frozenset(validated.extra_tags())
        self.requires = frozenset(info.requires) | frozenset(validated.extra_requires())
