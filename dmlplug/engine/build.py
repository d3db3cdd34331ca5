"""Assemble every component of a run from a validated recipe.

The dataset and the model are built by :func:`build_dataset` and :func:`build_model`, which both
:func:`build_components` (a training run) and :func:`dmlplug.engine.trained_run.load_run` (a trained run) use, so
the two can never disagree on how a recipe becomes a dataset and an embedding model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmlplug.context import BuildContext
from dmlplug.errors import ComponentError, DataError, DmlplugError, RunError
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
    #: Engine services the components require (:class:`dmlplug.needs.EngineNeeds`).
    needs: Any = None
    #: Named embedding the loss and miner train on (``[loss] embedding``; "" = the evaluation embedding).
    loss_embedding: str = ""
    #: The EMA copy of the model, created by the run when a component requires ``"ema"``.
    ema_model: Any = None
    #: The recipe's validated ``[optimizer]`` (engine options in ``.options``) and ``[scheduler]`` specs,
    #: built by :func:`dmlplug.engine.assembly.assemble` once the trained parameters are known.
    optimizer_spec: Any = None
    schedule_spec: Any = None
    #: The context the components were built with (the optimizer and the schedule are built with it too).
    context: BuildContext | None = None

    def trainable(self) -> dict[str, Any]:
        """The trained components besides the model, by recipe path: loss, miner (when present), regularizers.

        The one list the engine walks for device moves, train mode, after-step calls, broadcasts and
        checkpoints; read afresh on every call, so it follows a component replaced after the build.
        """
        modules = {"loss": self.loss}
        if self.miner is not None:
            modules["miner"] = self.miner
        for i, reg in enumerate(self.regularizers):
            modules[f"regularizers[{i}]"] = reg.module
        return modules

    def by_path(self) -> dict[str, Any]:
        """Every built component by recipe path (``"data.dataset"`` … ``"loggers[0]"``), as hooks see them."""
        out = {"data.dataset": self.dataset, "data.sampler": self.sampler, "backbone": self.model.backbone,
               "head": self.model.head, **self.trainable()}
        for section, built in (("evaluators", self.evaluators), ("loggers", self.loggers)):
            for i, (_, component) in enumerate(built):
                out[f"{section}[{i}]"] = component
        return out


def build_component(spec: Any, ctx: BuildContext) -> Any:
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


def new_context(recipe: Any, *, device: str, host: Any, run_dir: Path | None = None,
                quiet: bool = False) -> BuildContext:
    """The :class:`BuildContext` a recipe's components are built with, before anything is built."""
    return BuildContext(device=device, seed=recipe.recipe.run.seed, host=host, run_dir=run_dir, quiet=quiet,
                        needs=recipe.needs, recipe_specs=dict(recipe.components),
                        epochs=recipe.recipe.run.epochs, batch_size=recipe.recipe.data.batch_size,
                        image_size=recipe.recipe.data.image_size, resize_size=recipe.recipe.data.resize_size)


def build_dataset(recipe: Any, ctx: BuildContext) -> Any:
    """Build ``[data.dataset]`` (class selection applied) and fill the context's data fields.

    Raises:
        DataError: A split of the dataset is empty, or the training split or an evaluated split (report and
            selection) is below the minimum a run needs (:func:`dmlplug.data.splits.check_split_sizes`: two
            classes; two query classes with another item of their class to find), found here, not after an epoch.
        RunError: ``[evaluation] select_on`` or ``report_on`` is ``"val"`` and the dataset has no validation split
            (checked here, before the model is built, when ``dmlplug validate`` could not tell from the parameters).
    """
    # train_classes / test_classes re-partition the bundle by class name.
    from dmlplug.data.splits import apply_recipe_classes

    spec = recipe.components["data.dataset"]
    dataset = build_component(spec, ctx)
    _check_dataset(dataset, spec.name)
    dataset = apply_recipe_classes(dataset, recipe.recipe.data)
    _check_evaluated_splits(dataset, recipe, spec.name)
    ctx.train_labels = dataset.train.labels
    ctx.num_classes = int(dataset.train.num_classes)
    # Hierarchical samplers group classes by super-class.
    ctx.train_super_labels = (getattr(dataset.train, "attributes", None) or {}).get("super_labels")
    return dataset


def build_model(recipe: Any, ctx: BuildContext) -> Any:
    """Build backbone and head as one :class:`~dmlplug.engine.model.EmbeddingModel`; fill the model fields."""
    from dmlplug.engine.model import EmbeddingModel

    backbone = build_component(recipe.components["backbone"], ctx)
    ctx.feature_dim = int(backbone.num_features)
    head = build_component(recipe.components["head"], ctx)
    ctx.embedding_size = int(head.embedding_size)
    ctx.head = head
    return EmbeddingModel(backbone, head)


def build_transforms(recipe: Any, dataset: Any, views: int = 1, *, ctx: BuildContext) -> tuple[Any, Any]:
    """``(train transform, test transform)``; with ``views > 1`` the train transform gives that many views.

    The train transform is the recipe's augmentation (``[data] augment``; ``"auto"``: the dataset's
    ``default_augment``), built through the registry; the extra views use the policy's ``view_augment`` when it
    names one, else the same policy. The test transform is the engine's
    (:func:`dmlplug.data.transforms.build_test_transform`), centre-cropped unless the policy's ``eval_crop``
    says otherwise.

    Args:
        recipe: The :class:`~dmlplug.recipe.ValidatedRecipe`.
        dataset: The built dataset (its ``default_augment`` resolves ``"auto"``).
        views: Total number of views of every training image (``ctx.needs.views``).
        ctx: The run's context (its host's registry resolves the augmentation's name).

    Raises:
        ComponentError: ``"auto"`` resolves to an augmentation that is not registered, or a policy fails.
    """
    from dmlplug.data.transforms import build_test_transform, eval_crop, with_views

    data = recipe.recipe.data
    ctx = ctx.changed(image_size=data.image_size, resize_size=data.resize_size)
    spec = augmentation_spec(recipe, dataset, ctx)
    main = build_component(spec, ctx)

    def extra_view(view_augment: str | None) -> Any:
        return build_component(spec if not view_augment else _augmentation(
            view_augment, ctx, f"the view_augment of augmentation {spec.name!r} ([data] augment)"), ctx)

    train = with_views(main, views, extra_view)
    test = build_test_transform(image_size=data.image_size, resize_size=data.resize_size, crop=eval_crop(main))
    return train, test


def augmentation_spec(recipe: Any, dataset: Any, ctx: BuildContext) -> Any:
    """The validated ``[data] augment`` of the recipe; for ``"auto"``, the dataset's ``default_augment``.

    Raises:
        ComponentError: The dataset's default is not a registered augmentation.
    """
    spec = recipe.components.get("data.augment")
    if spec is not None:
        return spec
    name = dataset.default_augment  # the Dataset protocol declares it (checked when the dataset was built)
    return _augmentation(name, ctx, f'[data] augment = "auto": the default_augment of the dataset ({name!r})')


def _augmentation(name: str, ctx: BuildContext, where: str) -> Any:
    from dmlplug.recipe.loading import ComponentSpec
    from dmlplug.tables import validate_table

    try:
        table = validate_table("augmentations", {"name": name}, where=where, registry=ctx.registry())
    except ComponentError as exc:
        raise ComponentError(exc.what, where=where, fix=exc.fix) from None
    return ComponentSpec("data.augment", table)


def check_data(recipe: Any, ctx: BuildContext) -> dict[str, int]:
    """Build the dataset and the batch sampler as a run does, and drop them: the data checks without training.

    Returns:
        ``{"train_classes", "train_images", "steps_per_epoch"}``.

    Raises:
        DataError, ComponentError, RunError: What :func:`build_components` raises for the same recipe before it
            builds the model.
    """
    dataset = build_dataset(recipe, ctx)
    sampler = build_component(recipe.components["data.sampler"], ctx)
    return {"train_classes": int(dataset.train.num_classes), "train_images": len(dataset.train),
            "steps_per_epoch": len(sampler)}


def build_components(recipe: Any, ctx: BuildContext) -> Components:
    """Build dataset, sampler, model, loss, miner, regularizers, evaluators and loggers, in that order.

    Args:
        recipe: The :class:`~dmlplug.recipe.ValidatedRecipe`.
        ctx: A context from :func:`new_context`; it is filled as components are built.
    """
    specs = recipe.components
    dataset = build_dataset(recipe, ctx)
    sampler = build_component(specs["data.sampler"], ctx)
    ctx.steps_per_epoch = len(sampler)
    model = build_model(recipe, ctx)
    loss_spec = specs["loss"]
    loss = build_component(loss_spec, ctx)
    ctx.loss = loss
    miner = build_component(specs["miner"], ctx) if specs.get("miner") is not None else None
    regularizers = [Regularizer(spec.name, spec.options.weight, build_component(spec, ctx))
                    for spec in _listed(specs, "regularizers")]
    evaluators = [(spec.name, build_component(spec, ctx)) for spec in _listed(specs, "evaluators")]
    loggers = [(spec.name, build_component(spec, ctx)) for spec in _listed(specs, "loggers")]
    views = ctx.needs.views if ctx.needs is not None else 1
    train_transform, test_transform = build_transforms(recipe, dataset, views, ctx=ctx)
    return Components(
        dataset=dataset, sampler=sampler, model=model, loss=loss, loss_weight=loss_spec.options.weight,
        miner=miner, regularizers=regularizers, evaluators=evaluators, loggers=loggers,
        warmup_epochs=specs["backbone"].options.warmup_epochs, train_transform=train_transform,
        test_transform=test_transform, needs=ctx.needs, loss_embedding=loss_spec.options.embedding,
        optimizer_spec=specs["optimizer"], schedule_spec=specs["scheduler"], context=ctx,
    )


def _listed(specs: dict[str, Any], section: str) -> list[Any]:
    """Specs of a list section (``regularizers[0]``, ``regularizers[1]`` …) in recipe order."""
    return [spec for path, spec in specs.items() if path.startswith(section + "[")]


def _check_dataset(dataset: Any, name: str) -> None:
    for split in ("train", "test"):
        source = getattr(dataset, split, None)
        if source is None or len(source) == 0:
            raise DataError(f"dataset {name!r} has an empty {split} split", where="[data.dataset]",
                            fix="check the dataset root and split parameters")


def _check_evaluated_splits(dataset: Any, recipe: Any, name: str) -> None:
    # The earliest point where a dataset that cannot tell from its parameters (e.g. a CSV list) shows whether it
    # has a validation split and how many classes each split has: before the model, so a wrong split costs no
    # backbone build or download, and a split with one class never gives recall 1.0 before training.
    from dmlplug.data.splits import RECIPE_CLASSES_WHERE, check_split_sizes
    from dmlplug.engine.selection import check_metric_followers, evaluated_splits, resolve_splits
    from dmlplug.recipe.checks import metric_followers

    has_val = dataset.val is not None
    resolve_splits(recipe.recipe.evaluation, has_val=has_val, dataset=name)
    check_metric_followers(recipe.recipe.evaluation, has_val, metric_followers(recipe), name, recipe.source,
                           error=RunError)
    where = RECIPE_CLASSES_WHERE if recipe.recipe.data.train_classes is not None else f"[data.dataset] ({name})"
    check_split_sizes(dataset, ("train", *evaluated_splits(recipe.recipe.evaluation, has_val)), where=where)
