"""Assemble every component of a run from a validated recipe."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dmlplug.context import BuildContext
from dmlplug.errors import ComponentError, DataError, DmlplugError
from dmlplug.recipe import ComponentSpec, ValidatedRecipe
from dmlplug.registry import singular


@dataclass
class Regularizer:
    """A built regularizer with its recipe weight."""

    name: str
    weight: float
    module: Any


@dataclass
class Components:
    """Everything built from the recipe, before training starts."""

    dataset: Any
    sampler: Any
    model: Any
    loss: Any
    loss_weight: float
    miner: Any
    regularizers: list[Regularizer]
    evaluators: list[tuple[str, Any]]
    loggers: list[tuple[str, Any]]
    warmup_epochs: int
    train_transform: Any = None
    test_transform: Any = None
    extras: dict[str, Any] = field(default_factory=dict)
    #: Engine services the components require (:class:`dmlplug.recipe.EngineNeeds`).
    needs: Any = None
    #: Named embedding the loss and miner train on (``[loss] embedding``; "" = the evaluation embedding).
    loss_embedding: str = ""
    #: The EMA copy of the model, created by the run when a component requires ``"ema"``.
    ema_model: Any = None


def build_component(spec: ComponentSpec, ctx: BuildContext) -> Any:
    """Build one component; a failure inside a factory names the component and its plugin.

    Raises:
        DmlplugError: As raised by the factory (already user-facing).
        ComponentError: Any other exception of the factory, wrapped with where it happened.
    """
    try:
        return spec.build(ctx)
    except DmlplugError:
        raise
    except Exception as exc:
        raise ComponentError(
            f"building {singular(spec.info.kind)} {spec.name!r} failed: "
            f"{type(exc).__name__}: {exc}",
            where=f"recipe section {spec.path} (plugin {spec.info.plugin!r})",
            fix="check the component's parameters (`dmlplug list --params`); rerun with --debug for the traceback",
        ) from exc


def build_components(recipe: ValidatedRecipe, ctx: BuildContext) -> Components:
    """Build dataset, sampler, model, loss, miner, regularizers, evaluators and loggers, in that order."""
    from dmlplug.data.transforms import build_train_views, build_transform
    from dmlplug.engine.model import EmbeddingModel
    from dmlplug.recipe import engine_needs

    r = recipe.recipe
    needs = engine_needs(recipe, recipe.source)
    dataset = build_component(recipe.components["data.dataset"], ctx)
    _check_dataset(dataset, recipe.components["data.dataset"].name)
    # ooDML / class-name splits ([data] split_file or train_classes): re-partition by class name.
    from dmlplug.data.splits import apply_recipe_classes

    dataset = apply_recipe_classes(dataset, r.data)
    ctx.train_labels = dataset.train.labels
    ctx.num_classes = int(dataset.train.num_classes)
    ctx.batch_size = r.data.batch_size
    super_labels = (getattr(dataset.train, "attributes", None) or {}).get("super_labels")
    if super_labels is not None:  # hierarchical samplers group classes by super-class
        ctx.extras["train_super_labels"] = super_labels
    ctx.epochs = r.run.epochs
    sampler = build_component(recipe.components["data.sampler"], ctx)
    ctx.steps_per_epoch = len(sampler)

    backbone_spec = recipe.components["backbone"]
    backbone = build_component(backbone_spec, ctx)
    ctx.feature_dim = int(backbone.num_features)
    head = build_component(recipe.components["head"], ctx)
    ctx.embedding_size = int(head.embedding_size)
    ctx.head = head
    model = EmbeddingModel(backbone, head)

    loss_spec = recipe.components["loss"]
    # Components that train their own instances of the recipe's loss (S2SD) rebuild it from its spec.
    ctx.extras["loss_spec"] = loss_spec
    ctx.extras["miner_spec"] = recipe.component("miner")
    ctx.extras["engine_needs"] = needs
    loss = build_component(loss_spec, ctx)
    ctx.loss = loss
    miner = build_component(recipe.components["miner"], ctx) if recipe.component("miner") else None
    regularizers = [
        Regularizer(spec.name, spec.options["weight"], build_component(spec, ctx))
        for spec in recipe.list_components("regularizers")
    ]
    evaluators = [(spec.name, build_component(spec, ctx)) for spec in recipe.list_components("evaluators")]
    loggers = [(spec.name, build_component(spec, ctx)) for spec in recipe.list_components("loggers")]

    augment = r.data.augment if r.data.augment != "auto" else getattr(dataset, "default_augment", "dml")
    size, resize = r.data.image_size, r.data.resize_size
    return Components(
        dataset=dataset,
        sampler=sampler,
        model=model,
        loss=loss,
        loss_weight=loss_spec.options["weight"],
        miner=miner,
        regularizers=regularizers,
        evaluators=evaluators,
        loggers=loggers,
        warmup_epochs=backbone_spec.options["warmup_epochs"],
        train_transform=(build_transform("train", augment=augment, image_size=size, resize_size=resize)
                         if needs.views == 1 else build_train_views(augment=augment, image_size=size,
                                                                    views=needs.views)),
        test_transform=build_transform("test", augment=augment, image_size=size, resize_size=resize),
        needs=needs,
        loss_embedding=loss_spec.options.get("embedding", ""),
    )


def _check_dataset(dataset: Any, name: str) -> None:
    for split in ("train", "test"):
        source = getattr(dataset, split, None)
        if source is None or len(source) == 0:
            raise DataError(f"dataset {name!r} has an empty {split} split", where="[data.dataset]",
                            fix="check the dataset root and split parameters")
