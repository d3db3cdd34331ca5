"""What every contract check starts from: the tiny sizes, a plugin host, a build context, components by name.

Importing this module does not import torch; the functions that need it do.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from dmlplug.context import BuildContext
from dmlplug.params import Params
from dmlplug.plugins import PluginHost
from dmlplug.tables import ComponentTable, validate_table

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
    """Build a registered component from (default) parameters on the tiny context (its Protocol is checked)."""
    host = host or (ctx.host if ctx is not None and ctx.host is not None else load_host())
    table = validate_table(kind, {**params, "name": name}, where=f"{kind}.{name}", registry=host.registry)
    return table.build(ctx or make_context(host))


def tagged_table(host: PluginHost, kind: str, tags: Any) -> ComponentTable:
    """The first registered component of ``kind`` (by name) that offers every tag in ``tags``, with defaults.

    What satisfies a ``"<section>:<tag>"`` requirement in the checks (a regularizer that needs
    ``loss:proxies`` is checked with a loss tagged ``proxies``), from any installed plugin.

    Raises:
        ContractError: No registered component of ``kind`` offers the tags.
    """
    from dmlplug.errors import DmlplugError

    wanted = set(tags)
    for info in host.registry.infos(kind):
        try:  # a component with required parameters has no defaults to build from: not a candidate
            params = info.validate({}, where=f"{kind}.{info.name}", registry=host.registry)
        except DmlplugError:
            continue
        if wanted <= set(info.tags) | set(params.extra_tags()):
            return ComponentTable(info, params)
    raise ContractError(f"no registered {kind} offers the tag(s) {sorted(wanted)} that the component requires")


def expect_groups_declared(who: str, component: Any, params: Params, section: str) -> None:
    """The optimizer groups the engine builds for ``component`` are among ``params.optimizer_group_names()``.

    The engine's rule: a module with ``optimizer_param_groups()`` gets those groups; any other module with
    parameters one group named ``section``; a component without trainable parameters none.
    """
    from dmlplug.protocols import HasOptimizerParamGroups

    if isinstance(component, HasOptimizerParamGroups):
        # A part of a declared group (a layer of a backbone) is addressed by its parent's name.
        built = [group.get("parent") or group["name"] for group in component.optimizer_param_groups()
                 if list(group["params"])]
    else:
        parameters = getattr(component, "parameters", None)
        built = [section] if callable(parameters) and any(p.requires_grad for p in parameters()) else []
    declared = params.optimizer_group_names(section)
    undeclared = [name for name in built if name not in declared]
    expect(not undeclared, f"{who}: builds optimizer group(s) {undeclared} that Params.optimizer_group_names("
                           f"{section!r}) does not declare ({list(declared)}); `dmlplug validate` would reject "
                           f"[optimizer.groups.<name>] for them")


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
        table = validate_table(kind, {**(params or {}), "name": name}, where=f"{kind}.{name}",
                               registry=host.registry)
        self.name, self.kind, self.params = table.name, table.kind, table.params
        self.tags = frozenset(table.info.tags) | frozenset(table.params.extra_tags())
        self.requires = frozenset(table.info.requires) | frozenset(table.params.extra_requires())
