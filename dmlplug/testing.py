"""Contract checks for components, for plugin authors' CI (the built-ins pass the same checks).

A plugin's whole test suite can be one line::

    from dmlplug.testing import check_plugin

    def test_contracts():
        check_plugin("my_plugin")          # the module (or its import name) that holds the hookimpls

or, component by component::

    from dmlplug.testing import check_loss, load_host

    def test_my_loss():
        check_loss("my_loss", host=load_host("my_plugin"))

Every check builds the component from its registered ``Params`` defaults (or ``params=``) on a tiny,
seeded context: 8 classes of 4 samples (a batch of 32), 16-d embeddings, 24-d features, 3×8×8 images.
A failed check raises :class:`ContractError` (an ``AssertionError``, so pytest shows it as a failure)
whose message names the component and the broken rule. Requirements (``requires=``) the checks know how
to satisfy: ``loss:proxies``, ``loss:sub_centers``, ``features``, ``feature_map``, ``views:N``, ``ema``,
``named_embeddings`` (pass ``head=`` with a multi head), ``dataset:super_labels``, ``sampler:*`` (the
batch has equal class counts). Anything else is reported, never skipped.

Importing this module does not import torch; the checks do.
"""

from __future__ import annotations

import copy
import importlib
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

from dmlplug.context import BuildContext
from dmlplug.plugins import PluginHost

NUM_CLASSES, EMBEDDING_SIZE, PER_CLASS = 8, 16, 4
BATCH = NUM_CLASSES * PER_CLASS
FEATURE_DIM = 24
IMAGE_SIZE = 8

#: Requirements of regularizers the step built by :func:`make_step` satisfies.
STEP_REQUIREMENTS = ("loss:proxies", "loss:sub_centers", "features", "feature_map", "ema", "named_embeddings")

__all__ = [
    "BATCH", "EMBEDDING_SIZE", "FEATURE_DIM", "NUM_CLASSES", "PER_CLASS", "ContractError", "batch_labels", "build",
    "check_component", "check_evaluator", "check_head", "check_logger", "check_loss", "check_miner", "check_plugin",
    "check_regularizer", "check_sampler", "load_host", "make_context", "make_step", "sampler_context",
    "uneven_labels",
]


class ContractError(AssertionError):
    """A component breaks its kind's contract."""


def _expect(condition: Any, message: str) -> None:
    if not condition:
        raise ContractError(message)


# ---------------------------------------------------------------------------------------------- set-up
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
        name = getattr(module, "__name__", repr(module)).rsplit(".", 1)[-1]
        host.add_plugin(module, name)
        error = host.records[name].error
        _expect(error is None, f"plugin {name!r} failed to load or register: {error}")
    if not plugins and not entry_points:
        _DEFAULT_HOST = host
    return host


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
    return info.build(info.validate(params, where=f"{kind}.{name}"), ctx or make_context(host))


def _random_embeddings(batch: int = BATCH) -> tuple[Any, Any]:
    import torch

    raw = torch.randn(batch, EMBEDDING_SIZE, requires_grad=True)
    return raw, torch.nn.functional.normalize(raw, dim=1)


def _finite_grads(who: str, tensors: Any) -> int:
    import torch

    count = 0
    for t in tensors:
        if t.grad is not None:
            _expect(bool(torch.isfinite(t.grad).all()), f"{who}: non-finite gradient")
            count += 1
    return count


class _Declared:
    """A component's registration record with its tags and requirements for the given parameters.

    ``Params`` may add both depending on their values (``extra_tags()`` / ``extra_requires()``).
    """

    def __init__(self, info: Any, params: dict[str, Any] | None):
        self.name, self.kind = info.name, info.kind
        validated = info.validate(params or {}, where=f"{info.kind}.{info.name}")
        extra_tags = getattr(validated, "extra_tags", None)
        extra_requires = getattr(validated, "extra_requires", None)
        self.tags = frozenset(info.tags) | (frozenset(extra_tags()) if callable(extra_tags) else frozenset())
        self.requires = frozenset(info.requires) | (
            frozenset(extra_requires()) if callable(extra_requires) else frozenset())


def _info(host: PluginHost, kind: str, name: str, params: dict[str, Any] | None = None) -> _Declared:
    return _Declared(host.registry.get(kind, name), params)


# ---------------------------------------------------------------------------------------------- losses
def _context_loss(requires: Any) -> Any:
    """A loss that satisfies a component's ``loss:*`` requirements."""
    from pytorch_metric_learning.losses import ProxyAnchorLoss, SoftTripleLoss

    if "loss:sub_centers" in requires:
        return SoftTripleLoss(NUM_CLASSES, EMBEDDING_SIZE, centers_per_class=3)
    return ProxyAnchorLoss(NUM_CLASSES, EMBEDDING_SIZE)


def check_loss(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """A loss builds from its defaults, gives a finite scalar and finite gradients, and its tags are true.

    Tags checked against behaviour: ``uses_tuples`` (mined triplets change the value), ``has_parameters``
    (trainable parameters), ``proxies`` (:func:`dmlplug.engine.proxies.class_proxies` finds ``C×D``
    trainable proxies; without the tag it must not), ``needs_num_classes`` (building without
    ``num_classes`` fails with a message naming it).
    """
    import torch
    from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

    from dmlplug.engine.proxies import class_proxies

    host = host or load_host()
    params = params or {}
    info = _info(host, "losses", name, params)
    ctx = make_context(host, loss=_context_loss(info.requires))
    torch.manual_seed(0)
    loss = build("losses", name, ctx, **params)
    raw, embeddings = _random_embeddings()
    labels = batch_labels()
    value = loss(embeddings, labels)
    _expect(isinstance(value, torch.Tensor) and value.dim() == 0 and bool(torch.isfinite(value)),
            f"loss {name!r}: expected a finite scalar tensor, got {value!r}")
    value.backward()
    _finite_grads(f"loss {name!r}", [raw, *loss.parameters()])
    _expect(raw.grad is not None, f"loss {name!r}: no gradient reaches the embeddings")

    fixed = embeddings.detach()
    partial = tuple(t[:40] for t in lmu.get_all_triplets_indices(labels))

    def value_with(indices_tuple: Any) -> Any:
        torch.manual_seed(1)  # fresh, identically initialised loss: stateful losses compare fairly
        return build("losses", name, ctx, **params)(fixed, labels, indices_tuple)

    without = value_with(None)
    try:
        changed = not torch.allclose(without, value_with(partial))
    except (ValueError, AssertionError):
        changed = False  # the loss rejects mined tuples
    _expect(changed == ("uses_tuples" in info.tags),
            f"loss {name!r}: mined tuples {'change' if changed else 'do not change'} the value, but the tag "
            f"uses_tuples is {'missing' if changed else 'set'}")
    has_params = any(p.requires_grad for p in loss.parameters())
    _expect(has_params == ("has_parameters" in info.tags),
            f"loss {name!r}: has_parameters tag {'missing' if has_params else 'set without trainable parameters'}")
    if "proxies" in info.tags:
        proxies = class_proxies(loss)
        _expect(tuple(proxies.shape) == (NUM_CLASSES, EMBEDDING_SIZE) and proxies.requires_grad,
                f"loss {name!r}: tagged proxies but class_proxies gives {tuple(proxies.shape)}")
    else:
        try:
            class_proxies(loss)
        except TypeError:
            pass
        else:
            raise ContractError(f"loss {name!r}: has class proxies but lacks the 'proxies' tag")
    if "needs_num_classes" in info.tags:
        try:
            build("losses", name, make_context(host, num_classes=None), **params)
        except Exception as exc:
            _expect("num_classes" in str(exc), f"loss {name!r}: building without num_classes fails, but the "
                                               f"message does not name it: {exc}")
        else:
            raise ContractError(f"loss {name!r}: tagged needs_num_classes but builds without num_classes")


# ---------------------------------------------------------------------------------------------- miners
def _miner_labels(info: Any) -> Any:
    import torch

    if "packaged_triplets" in info.tags:
        # (anchor, positive, negative) triples: class c, class c, class c+1.
        return torch.tensor([[c, c, (c + 1) % NUM_CLASSES] for c in range(10)]).flatten() % NUM_CLASSES
    return batch_labels()


def check_miner(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """A miner returns valid pairs ``(a1, p, a2, n)`` or triplets ``(a, p, n)`` as its tags say, on an easy batch."""
    import torch

    host = host or load_host()
    info = _info(host, "miners", name, params)
    torch.manual_seed(0)
    miner = build("miners", name, make_context(host), **(params or {}))
    labels = _miner_labels(info)
    _, embeddings = _random_embeddings(len(labels))
    tuples = miner(embeddings, labels)
    _expect("triplets" in info.tags or "pairs" in info.tags, f"miner {name!r}: tag it 'pairs' or 'triplets'")
    expected = 3 if "triplets" in info.tags else 4
    _expect(len(tuples) == expected, f"miner {name!r}: returned a {len(tuples)}-tuple, tags {sorted(info.tags)}")
    for t in tuples:
        _expect(t.dtype == torch.long and t.dim() == 1, f"miner {name!r}: indices must be 1-d int64 tensors")
        _expect(len(t) == 0 or (int(t.min()) >= 0 and int(t.max()) < len(labels)),
                f"miner {name!r}: index out of range")
    groups = [tuples] if expected == 3 else [tuples[:2], tuples[2:]]
    for group in groups:
        _expect(len({len(t) for t in group}) == 1, f"miner {name!r}: ragged index tuple")
    _expect(sum(len(t) for t in tuples) > 0, f"miner {name!r}: mined nothing on an easy batch")
    y = labels
    if expected == 4:
        a1, p, a2, n = tuples
        _expect(bool((y[a1] == y[p]).all() and (a1 != p).all()), f"miner {name!r}: invalid positive pairs")
        _expect(bool((y[a2] != y[n]).all()), f"miner {name!r}: invalid negative pairs")
    else:
        a, p, n = tuples
        regular = (y[a] == y[p]) & (a != p) & (y[n] != y[a])
        if "rho_swap" in info.tags:
            # ρ-regularisation: (a, a, p') with p' another sample of a's class.
            regular |= (a == p) & (y[n] == y[a]) & (n != a)
        _expect(bool(regular.all()), f"miner {name!r}: invalid triplets")


# ---------------------------------------------------------------------------------------------- regularizers
def _views_needed(requires: Any) -> int:
    views = [int(r.split(":", 1)[1]) for r in requires if r.startswith("views:")]
    return max(views, default=1)


def make_step(ctx: BuildContext, requires: Any = (), head: dict[str, Any] | None = None) -> tuple[Any, list[Any]]:
    """A training step as the engine builds it, from a tiny model on random 3×8×8 images.

    The model is a small convolutional backbone (``features``, ``feature_map``) and the head ``head``
    (a registered head table, default ``{"name": "linear", "embedding_size": 16}``), wrapped in the
    engine's :class:`~dmlplug.engine.model.EmbeddingModel`. ``ema`` adds a frozen deep copy, ``views:N``
    ``N - 1`` extra views. ``ctx.head`` / ``ctx.feature_dim`` / ``ctx.embedding_size`` are set to match.

    Returns:
        ``(step, trainable)``: the :class:`~dmlplug.engine.step.StepOutput` and the model's parameters.

    Raises:
        ContractError: A requirement cannot be provided.
    """
    import torch
    from torch import nn

    from dmlplug.engine.model import EmbeddingModel
    from dmlplug.engine.step import StepOutput

    missing = [r for r in requires if r not in STEP_REQUIREMENTS and not r.startswith(("views:", "sampler:"))]
    _expect(not missing, f"dmlplug.testing cannot provide the requirement(s) {missing}; build the component "
                         "yourself and pass it a StepOutput (see dmlplug.testing.make_step)")

    class TinyBackbone(nn.Module):
        num_features = FEATURE_DIM

        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, FEATURE_DIM, 3, padding=1)

        def forward(self, images):
            fmap = torch.relu(self.conv(images))
            return fmap.mean((2, 3)), fmap

    table = dict(head or {"name": "linear", "embedding_size": EMBEDDING_SIZE})
    head_name = table.pop("name")
    ctx.feature_dim = FEATURE_DIM
    head_module = build("heads", head_name, ctx, **table)
    ctx.head = head_module
    ctx.embedding_size = int(head_module.embedding_size)
    model = EmbeddingModel(TinyBackbone(), head_module)
    if "named_embeddings" in requires:
        _expect(head is not None, "the component requires named_embeddings: pass head={'name': 'multi', "
                                  "'heads': {...}} with the heads it needs")
    images = torch.randn(BATCH, 3, IMAGE_SIZE, IMAGE_SIZE)
    views = [torch.randn(BATCH, 3, IMAGE_SIZE, IMAGE_SIZE) for _ in range(_views_needed(requires) - 1)]
    ema_model = None
    if "ema" in requires:
        ema_model = copy.deepcopy(model)
        for p in ema_model.parameters():
            p.requires_grad_(False)
    out = model(images)
    step = StepOutput(
        embeddings=out.embedding.float(), labels=batch_labels(), features=out.features, feature_map=out.feature_map,
        named_embeddings=out.named or {}, loss_module=ctx.loss, indices=torch.arange(BATCH), images=images,
        views=views, epoch=1, step=1, model=model, ema_model=ema_model,
    )
    return step, list(model.parameters())


def _regularizer_context(host: PluginHost, requires: Any) -> BuildContext:
    """The tiny context with the recipe's loss as the engine provides it.

    ``ctx.loss`` is built from a spec that is also in ``ctx.extras["loss_spec"]`` (``proxy_anchor``, or
    ``soft_triple`` with 3 centres for ``loss:sub_centers``); ``ctx.extras["miner_spec"]`` is ``None``.
    """
    from dmlplug.recipe import ComponentSpec

    name, values = ("soft_triple", {"centers_per_class": 3}) if "loss:sub_centers" in requires else (
        "proxy_anchor", {})
    info = host.registry.get("losses", name)
    spec = ComponentSpec("loss", info, info.validate(values, where="loss"), {"weight": 1.0})
    ctx = make_context(host, loss=None)
    ctx.extras.update({"loss_spec": spec, "miner_spec": None})
    ctx.loss = spec.build(ctx)
    return ctx


def check_regularizer(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None,
                      head: dict[str, Any] | None = None) -> None:
    """A regularizer gives finite scalar terms with finite gradients, over two steps (state updates included).

    ``after_optimizer_step(step)`` is called between the steps when the regularizer defines it.
    """
    import torch

    host = host or load_host()
    info = _info(host, "regularizers", name, params)
    ctx = _regularizer_context(host, info.requires)
    torch.manual_seed(0)
    step, trainable = make_step(ctx, info.requires, head)
    regularizer = build("regularizers", name, ctx, **(params or {}))
    for index in range(2):
        if index:
            step, trainable = make_step(ctx, info.requires, head)
            step.step = 2
        out = regularizer(step)
        terms = out if isinstance(out, dict) else {name: out}
        _expect(terms, f"regularizer {name!r}: no term")
        for key, term in terms.items():
            _expect(isinstance(term, torch.Tensor) and term.dim() == 0 and bool(torch.isfinite(term)),
                    f"regularizer {name!r} term {key!r}: expected a finite scalar tensor, got {term!r}")
        total = sum(terms.values())
        if total.requires_grad:
            total.backward()
        own = list(regularizer.parameters()) if isinstance(regularizer, torch.nn.Module) else []
        count = _finite_grads(f"regularizer {name!r}", [*trainable, *own, *ctx.loss.parameters()])
        _expect(count >= 1, f"regularizer {name!r}: no gradient reaches the model, the loss or its own parameters")
        after = getattr(regularizer, "after_optimizer_step", None)
        if callable(after):
            after(step)


# ---------------------------------------------------------------------------------------------- samplers
def sampler_context(host: PluginHost, info: Any, labels: Any, batch_size: int = 16, seed: int = 3) -> BuildContext:
    """A context for a sampler: ``labels`` as training labels, super-labels ``labels % 4`` when required."""
    extras = {}
    if "dataset:super_labels" in info.requires:
        extras["train_super_labels"] = labels % 4
    missing = set(info.requires) - {"dataset:super_labels"}
    _expect(not missing, f"sampler {info.name!r}: dmlplug.testing cannot provide {sorted(missing)}")
    return make_context(host, train_labels=labels, batch_size=batch_size, seed=seed, extras=extras)


def uneven_labels() -> Any:
    """12 classes of sizes 3..14 (some smaller than a per-class group) in shuffled order."""
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.permutation(np.repeat(np.arange(12), np.arange(3, 15))).astype(np.int64)


def check_sampler(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """Full batches of valid indices, ``len`` = batches per epoch, batches a function of (seed, epoch) only."""
    host = host or load_host()
    params = params or {}
    info = _info(host, "samplers", name, params)
    labels = uneven_labels()

    def make(seed: int = 3) -> Any:
        return build("samplers", name, sampler_context(host, info, labels, seed=seed), **params)

    sampler = make()
    _expect(len(sampler) == len(labels) // 16, f"sampler {name!r}: len {len(sampler)}, expected {len(labels) // 16}")
    sampler.set_epoch(1)
    first = list(sampler)
    _expect(len(first) == len(sampler), f"sampler {name!r}: yields {len(first)} batches, len says {len(sampler)}")
    for batch in first:
        _expect(len(batch) == 16 and all(isinstance(i, int) and 0 <= i < len(labels) for i in batch),
                f"sampler {name!r}: batches must be 16 int indices into the dataset, got {batch!r}")
    _expect(list(sampler) == first, f"sampler {name!r}: iterating twice in one epoch must give the same batches")
    again = make()
    again.set_epoch(2)
    second = list(again)
    again.set_epoch(1)
    _expect(list(again) == first, f"sampler {name!r}: batches must depend on (seed, epoch) only")
    _expect(second != first, f"sampler {name!r}: different epochs must give different batches")
    other = make(seed=4)
    other.set_epoch(1)
    _expect(list(other) != first, f"sampler {name!r}: different seeds must give different batches")


# ---------------------------------------------------------------------------------------------- others
def check_evaluator(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """An evaluator returns a dict of float metrics (NaN allowed, never inf), the same twice on the same data.

    An empty dict is allowed: some evaluators contribute only at the end of a run. An evaluator tagged
    ``needs_model`` (it adapts or re-embeds the model, e.g. ``fewshot``) must instead refuse saved embeddings
    with a :class:`~dmlplug.errors.DmlplugError`.
    """
    import numpy as np

    from dmlplug.errors import DmlplugError
    from dmlplug.evaluation import EvalContext
    from dmlplug.evaluation.runner import run_evaluators

    host = host or load_host()
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(NUM_CLASSES), 6)
    x = rng.normal(size=(len(labels), EMBEDDING_SIZE)) + 2.0 * rng.normal(size=(NUM_CLASSES, EMBEDDING_SIZE))[labels]
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    results = []
    before = {plugin_name for plugin_name, _ in host.pm.list_name_plugin()}
    needs_model = "needs_model" in host.registry.get("evaluators", name).tags
    try:
        if needs_model:
            evaluator = build("evaluators", name, make_context(host), **(params or {}))
            try:
                run_evaluators([evaluator], EvalContext(x, labels, backend="torch", seed=0))
            except DmlplugError:
                return
            raise ContractError(f"evaluator {name!r} is tagged needs_model but evaluated bare embeddings "
                                "without a clear error")
        for _ in range(2):
            evaluator = build("evaluators", name, make_context(host), **(params or {}))
            results.append(run_evaluators([evaluator], EvalContext(x, labels, backend="torch", seed=0)))
    finally:
        # An evaluator may register itself for run hooks when built; no run follows here.
        for plugin_name, _ in host.pm.list_name_plugin():
            if plugin_name not in before:
                host.unregister_run_plugin(plugin_name)
    metrics = results[0]
    _expect(isinstance(metrics, dict), f"evaluator {name!r}: evaluate must return a dict")
    for key, value in metrics.items():
        _expect(isinstance(value, float) and not math.isinf(value), f"evaluator {name!r}: {key} = {value!r}")
    _expect(str(results[0]) == str(results[1]), f"evaluator {name!r}: not deterministic: {results}")


def check_head(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """A head maps ``B×F`` features to ``B×embedding_size`` (or named embeddings with ``eval_embedding``)."""
    import torch

    host = host or load_host()
    torch.manual_seed(0)
    head = build("heads", name, make_context(host), **(params or {}))
    features = torch.randn(BATCH, FEATURE_DIM, requires_grad=True)
    out = head(features)
    if isinstance(out, dict):
        _expect(callable(getattr(head, "eval_embedding", None)), f"head {name!r}: named output needs eval_embedding")
        out = head.eval_embedding(out)
    _expect(tuple(out.shape) == (BATCH, int(head.embedding_size)),
            f"head {name!r}: output {tuple(out.shape)}, embedding_size {head.embedding_size}")
    out.sum().backward()
    _expect(features.grad is not None and bool(torch.isfinite(features.grad).all()),
            f"head {name!r}: no finite gradient to the features")


def check_logger(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """A logger builds and implements at least one lifecycle hook (and nothing that is not a hook)."""
    from dmlplug import hookspecs

    host = host or load_host()
    logger = build("loggers", name, make_context(host), **(params or {}))
    marked = [attr for attr in dir(logger) if hasattr(getattr(logger, attr, None), "dmlplug_impl")]
    _expect(marked, f"logger {name!r}: implements no hook (mark methods with @dmlplug.hookimpl)")
    unknown = [m for m in marked if not hasattr(hookspecs, m)]
    _expect(not unknown, f"logger {name!r}: {unknown} are not dmlplug hooks")


_CHECKS: dict[str, Callable[..., None]] = {
    "losses": check_loss, "miners": check_miner, "regularizers": check_regularizer, "samplers": check_sampler,
    "evaluators": check_evaluator, "heads": check_head, "loggers": check_logger,
}


def check_component(kind: str, name: str, **kwargs: Any) -> None:
    """Run the contract check of ``kind`` on component ``name`` (``kwargs`` go to the check).

    Raises:
        ContractError: The component breaks the contract, or there is no check for ``kind``
            (datasets and backbones need data or weights; test them with a tiny recipe).
    """
    from dmlplug.registry import normalize_kind

    kind = normalize_kind(kind)
    _expect(kind in _CHECKS, f"no contract check for {kind}; checked kinds: {sorted(_CHECKS)}")
    _CHECKS[kind](name, **kwargs)


def check_plugin(plugin: str | ModuleType | Any, **kwargs: Any) -> list[tuple[str, str]]:
    """Load ``plugin`` next to the built-ins and check every component it registers.

    Args:
        plugin: The plugin module (or its import name).
        **kwargs: Per-component options, keyed ``"<kind>.<name>"`` (e.g. ``{"regularizers.my_reg":
            {"head": {...}}}``) passed as ``**kwargs`` to the check.

    Returns:
        The ``(kind, name)`` pairs checked.

    Raises:
        ContractError: The plugin fails to load, registers nothing, or a component breaks its contract.
    """
    host = load_host(plugin)
    module = importlib.import_module(plugin) if isinstance(plugin, str) else plugin
    plugin_name = getattr(module, "__name__", repr(module)).rsplit(".", 1)[-1]
    checked = []
    from dmlplug.registry import KINDS

    for kind in KINDS:
        for info in host.registry.infos(kind):
            if info.plugin != plugin_name or kind not in _CHECKS:
                continue
            _CHECKS[kind](info.name, host=host, **kwargs.get(f"{kind}.{info.name}", {}))
            checked.append((kind, info.name))
    _expect(checked, f"plugin {plugin_name!r} registers no component with a contract check")
    return checked
