"""Assemble every component of a run from a validated recipe.

The dataset and the model are built by :func:`build_dataset` and :func:`build_model`, which both
:func:`build_components` (a training run) and :func:`dmlplug.engine.loading.load_run` (a trained run) use, so
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
                        epochs=recipe.recipe.run.epochs, batch_size=recipe.recipe.data.batch_size)


def build_dataset(recipe: Any, ctx: BuildContext) -> Any:
    """Build ``[data.dataset]`` (class selection applied) and fill the context's data fields.

    Raises:
        DataError: A split of the dataset is empty, or an evaluated split has no query with another item of its
            class in the gallery (every kNN metric would be undefined: found here, not after an epoch).
        RunError: ``[evaluation] split = "val"`` and the dataset has no validation split (checked here, before
            the model is built, when ``dmlplug validate`` could not tell from the parameters).
    """
    # train_classes / test_classes re-partition the bundle by class name.
    from dmlplug.data.splits import apply_recipe_classes

    spec = recipe.components["data.dataset"]
    dataset = build_component(spec, ctx)
    _check_dataset(dataset, spec.name)
    dataset = apply_recipe_classes(dataset, recipe.recipe.data)
    _check_selection_split(dataset, recipe, spec.name)
    _check_evaluable(dataset, recipe, spec.name)
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


def build_transforms(recipe: Any, dataset: Any, views: int = 1) -> tuple[Any, Any]:
    """``(train transform, test transform)``; with ``views > 1`` the train transform gives that many views."""
    from dmlplug.data.transforms import build_train_views, build_transform

    data = recipe.recipe.data
    augment = data.augment if data.augment != "auto" else getattr(dataset, "default_augment", "dml")
    size, resize = data.image_size, data.resize_size
    train = (build_transform("train", augment=augment, image_size=size, resize_size=resize) if views == 1
             else build_train_views(augment=augment, image_size=size, views=views))
    return train, build_transform("test", augment=augment, image_size=size, resize_size=resize)


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
    regularizers = [Regularizer(spec.name, spec.options["weight"], build_component(spec, ctx))
                    for spec in _listed(specs, "regularizers")]
    evaluators = [(spec.name, build_component(spec, ctx)) for spec in _listed(specs, "evaluators")]
    loggers = [(spec.name, build_component(spec, ctx)) for spec in _listed(specs, "loggers")]
    train_transform, test_transform = build_transforms(recipe, dataset, ctx.needs.views)
    return Components(
        dataset=dataset, sampler=sampler, model=model, loss=loss, loss_weight=loss_spec.options["weight"],
        miner=miner, regularizers=regularizers, evaluators=evaluators, loggers=loggers,
        warmup_epochs=specs["backbone"].options["warmup_epochs"], train_transform=train_transform,
        test_transform=test_transform, needs=ctx.needs, loss_embedding=loss_spec.options.get("embedding", ""),
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


def _check_evaluable(dataset: Any, recipe: Any, name: str) -> None:
    # Labels alone decide whether any query has a same-class item in its gallery; the evaluation would refuse
    # the split anyway (evaluation.api.check_valid_queries), but only after the first epoch when
    # [evaluation] initial = false. The label logic is EvalContext's own: built on 1-d zero embeddings.
    import numpy as np

    from dmlplug.evaluation import EvalContext

    splits = ["test"] + (["val"] if recipe.recipe.evaluation.split == "val" else [])
    for split in splits:
        labels = getattr(dataset, split).labels
        masks = {}
        if split == "test" and dataset.test_query_mask is not None:
            masks = {"query_mask": dataset.test_query_mask, "gallery_mask": dataset.test_gallery_mask}
        ctx = EvalContext(np.zeros((len(labels), 1), dtype=np.float32), labels, **masks)
        if len(ctx.knn_queries) == 0:
            raise DataError(
                f"the {split} split of dataset {name!r} has no query with another item of its class in the "
                f"gallery ({ctx.num_queries} queries), so every retrieval metric would be undefined",
                where="[data.dataset]",
                fix="give every evaluated class at least two images (or, with query/gallery lists, gallery "
                    "images of the query classes)")


def _check_selection_split(dataset: Any, recipe: Any, name: str) -> None:
    # The earliest point where a dataset that cannot tell from its parameters (e.g. a CSV list) shows whether
    # it has a validation split: before the model, so a wrong split costs no backbone build or download.
    if recipe.recipe.evaluation.split == "val" and getattr(dataset, "val", None) is None:
        raise RunError(f'evaluation.split is "val" but dataset {name!r} has no validation split',
                       where="[evaluation] split",
                       fix='set [evaluation] split = "test", or give the dataset validation classes (val_classes '
                           "in [data.dataset], or 'val' rows in a CSV list)")
