"""Contract check of regularizers, and the training step it feeds them (:func:`make_step`)."""

from __future__ import annotations

import copy
from typing import Any

from dmlplug.context import BuildContext
from dmlplug.plugins import PluginHost
from dmlplug.tables import validate_table
from dmlplug.testing.fixtures import (
    BATCH,
    EMBEDDING_SIZE,
    FEATURE_DIM,
    IMAGE_SIZE,
    Declared,
    batch_labels,
    build,
    expect,
    expect_groups_declared,
    finite_grads,
    load_host,
    make_context,
    tagged_table,
)

#: Requirements of regularizers the step built by :func:`make_step` satisfies.
STEP_REQUIREMENTS = ("loss:proxies", "loss:sub_centers", "features", "feature_map", "ema", "named_embeddings")


def views_needed(requires: Any) -> int:
    """The number of views ``requires`` asks for (``views:N``; 1 without)."""
    views = [int(r.split(":", 1)[1]) for r in requires if r.startswith("views:")]
    return max(views, default=1)


def make_step(ctx: BuildContext, requires: Any = (), head: dict[str, Any] | None = None) -> tuple[Any, list[Any]]:
    """A training step as the engine builds it, from a tiny model on random 3×8×8 images.

    The model is a small convolutional backbone (``features``, ``feature_map``) and the head ``head``
    (a registered head table, default ``{"name": "linear", "embedding_size": 16}``), wrapped in the
    engine's :class:`~dmlplug.engine.model.EmbeddingModel`. ``ema`` adds a frozen deep copy, ``views:N``
    ``N - 1`` extra views. ``ctx.head`` / ``ctx.feature_dim`` / ``ctx.embedding_size`` are set to match.

    Returns:
        ``(step, trainable)``: the :class:`~dmlplug.step.StepOutput` and the model's parameters.

    Raises:
        ContractError: A requirement cannot be provided.
    """
    import torch
    from torch import nn

    from dmlplug.engine.model import EmbeddingModel
    from dmlplug.step import StepOutput

    missing = [r for r in requires if r not in STEP_REQUIREMENTS and not r.startswith(("views:", "sampler:"))]
    expect(not missing, f"dmlplug.testing cannot provide the requirement(s) {missing}; build the component "
                        "yourself and pass it a StepOutput (see dmlplug.testing.make_step)")

    class TinyBackbone(nn.Module):
        num_features = FEATURE_DIM

        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, FEATURE_DIM, 3, padding=1)

        def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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
        expect(head is not None, "the component requires named_embeddings: pass head={'name': 'multi', "
                                 "'heads': {...}} with the heads it needs")
    images = torch.randn(BATCH, 3, IMAGE_SIZE, IMAGE_SIZE)
    views = [torch.randn(BATCH, 3, IMAGE_SIZE, IMAGE_SIZE) for _ in range(views_needed(requires) - 1)]
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


def regularizer_context(host: PluginHost, requires: Any, loss: dict[str, Any] | None = None) -> BuildContext:
    """The tiny context with the recipe's loss as the engine provides it.

    ``ctx.loss`` is built from the table the engine would hold at ``ctx.recipe_specs["loss"]``: ``loss`` when
    given, else the first registered loss offering every ``loss:<tag>`` the component requires
    (:func:`~dmlplug.testing.fixtures.tagged_table`), so ``ctx.rebuild("loss")`` gives a fresh copy of it; the
    recipe has no miner (``ctx.rebuild("miner")`` is ``None``).
    """
    tags = [r.split(":", 1)[1] for r in requires if r.startswith("loss:")]
    if loss is not None:
        table = validate_table("losses", loss, where="loss", registry=host.registry)
    else:
        table = tagged_table(host, "losses", tags or ["proxies"])
    ctx = make_context(host, loss=None, recipe_specs={"loss": table})
    ctx.loss = table.build(ctx)
    return ctx


def check_regularizer(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None,
                      head: dict[str, Any] | None = None, loss: dict[str, Any] | None = None) -> None:
    """A regularizer gives finite scalar terms with finite gradients, over two steps (state updates included).

    ``after_optimizer_step(step)`` is called between the steps when the regularizer defines it; the optimizer
    groups it builds must be declared (``Params.optimizer_group_names``).

    Args:
        name: The registered name.
        host: The plugin host (default: the built-ins).
        params: Parameters (default: the Params defaults).
        head: The head table of the step (``named_embeddings`` needs a head with named outputs).
        loss: The recipe's loss table (default: the first loss offering the ``loss:<tag>`` requirements).
    """
    import torch

    host = host or load_host()
    info = Declared(host, "regularizers", name, params)
    ctx = regularizer_context(host, info.requires, loss)
    torch.manual_seed(0)
    step, trainable = make_step(ctx, info.requires, head)
    regularizer = build("regularizers", name, ctx, **(params or {}))
    expect_groups_declared(f"regularizer {name!r}", regularizer, info.params, info.name)
    for index in range(2):
        if index:
            step, trainable = make_step(ctx, info.requires, head)
            step.step = 2
        out = regularizer(step)
        terms = out if isinstance(out, dict) else {name: out}
        expect(terms, f"regularizer {name!r}: no term")
        for key, term in terms.items():
            expect(isinstance(term, torch.Tensor) and term.dim() == 0 and bool(torch.isfinite(term)),
                   f"regularizer {name!r} term {key!r}: expected a finite scalar tensor, got {term!r}")
        total = sum(terms.values())
        if total.requires_grad:
            total.backward()
        own = list(regularizer.parameters()) if isinstance(regularizer, torch.nn.Module) else []
        count = finite_grads(f"regularizer {name!r}", [*trainable, *own, *ctx.loss.parameters()])
        expect(count >= 1, f"regularizer {name!r}: no gradient reaches the model, the loss or its own parameters")
        after = getattr(regularizer, "after_optimizer_step", None)
        if callable(after):
            after(step)
