"""Checks across sections that components answer from their parameters, without building anything.

Each check asks the components' :class:`~dmlplug.params.Params` a question (which metrics an evaluator
produces, whether a dataset has a validation split, which batch sizes a sampler takes, which optimizer groups
a component has). A component that declares nothing answers with the default, which is what the engine does
with it, so every check runs for every plugin (only a dataset may answer "the data decides").
:func:`check_recipe` runs them all; :func:`dmlplug.recipe.load_recipe` calls it after the capability checks,
so ``dmlplug validate`` rejects these mistakes before a run builds anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dmlplug.errors import RecipeError, did_you_mean

if TYPE_CHECKING:
    from dmlplug.recipe.loading import ComponentSpec, ValidatedRecipe


def check_recipe(recipe: ValidatedRecipe, where: str) -> None:
    """Run every parameter-level check of :mod:`dmlplug.recipe.checks`.

    Raises:
        RecipeError: The first mistake found, with where it is and how to fix it.
    """
    check_selection_metric(recipe, where)
    check_validation_split(recipe, where)
    check_batch_size(recipe, where)
    check_optimizer_groups(recipe, where)


def evaluator_metric_names(recipe: ValidatedRecipe) -> list[str]:
    """Every metric name the recipe's evaluators declare, in order."""
    names: list[str] = []
    for spec in recipe.list_components("evaluators"):
        names.extend(name for name in spec.params.metric_names() if name not in names)
    return names


def check_selection_metric(recipe: ValidatedRecipe, where: str) -> None:
    """``[evaluation] metric`` must be produced by an evaluator of the recipe.

    Raises:
        RecipeError: No evaluator declares the metric (``Params.metric_names()``).
    """
    names = evaluator_metric_names(recipe)
    metric = recipe.recipe.evaluation.metric
    if metric in names:
        return
    evaluators = ", ".join(spec.name for spec in recipe.list_components("evaluators")) or "none"
    silent = [spec.info.label for spec in recipe.list_components("evaluators") if not spec.params.metric_names()]
    fix = ("choose one of: " + ", ".join(names)) if names else \
        "add an [[evaluators]] table that produces it (see `dmlplug list evaluators`)"
    if silent:
        fix += "; these evaluators declare no metric names (their Params.metric_names()): " + ", ".join(silent)
    raise RecipeError(
        f"evaluation.metric {metric!r} is not produced by the recipe's evaluators ({evaluators})"
        f"{did_you_mean(metric, names)}",
        where=f"{where}: [evaluation] metric", fix=fix,
    )


def has_validation_split(recipe: ValidatedRecipe) -> bool | None:
    """Whether the run's dataset will have a ``val`` split; ``None`` when the parameters cannot tell."""
    data = recipe.recipe.data
    if data.train_classes is not None:
        # [data] train_classes / test_classes re-split the dataset: val exists iff val_classes names some.
        return bool(data.val_classes)
    dataset = recipe.component("data.dataset")
    return dataset.params.has_validation_split() if dataset is not None else None


def check_validation_split(recipe: ValidatedRecipe, where: str) -> None:
    """``[evaluation] split = "val"`` needs a dataset with a validation split.

    Raises:
        RecipeError: The dataset's parameters say it has none.
    """
    if recipe.recipe.evaluation.split != "val" or has_validation_split(recipe) is not False:
        return
    dataset = recipe.component("data.dataset")
    name = dataset.name if dataset is not None else "?"
    raise RecipeError(
        f'evaluation.split is "val" but dataset {name!r} (with these parameters) has no validation split',
        where=f"{where}: [evaluation] split",
        fix='set [evaluation] split = "test", or give the dataset validation classes (its val_classes or '
            "val_fraction parameter, or [data] val_classes with train_classes/test_classes)",
    )


def check_batch_size(recipe: ValidatedRecipe, where: str) -> None:
    """``[data] batch_size`` must be a multiple of what the sampler groups by (``m`` of ``m_per_class``).

    Raises:
        RecipeError: The batch size is not a multiple of the sampler's group size.
    """
    sampler = recipe.component("data.sampler")
    multiple = sampler.params.batch_size_multiple() if sampler is not None else 1
    batch_size = recipe.recipe.data.batch_size
    if sampler is None or batch_size % multiple == 0:
        return
    lower, upper = batch_size - batch_size % multiple, batch_size - batch_size % multiple + multiple
    sizes = f"{lower} or {upper}" if lower > 0 else str(upper)
    raise RecipeError(
        f"[data] batch_size = {batch_size} is not a multiple of {multiple}, the group size of sampler "
        f"{sampler.name!r}",
        where=f"{where}: [data] batch_size and [data.sampler]",
        fix=f"use batch_size = {sizes}, or change the sampler's parameters (`dmlplug list samplers --params`)",
    )


def _trainable(recipe: ValidatedRecipe) -> list[tuple[str, ComponentSpec]]:
    # The components whose parameters enter the optimizer, with the group name the engine gives each one
    # (engine/assembly.py trainable_groups: backbone, head, loss, each regularizer by its name).
    out = [(section, recipe.component(section)) for section in ("backbone", "head", "loss")]
    out += [(spec.name, spec) for spec in recipe.list_components("regularizers")]
    return [(section, spec) for section, spec in out if spec is not None]


def optimizer_group_names(recipe: ValidatedRecipe) -> list[str]:
    """The optimizer group names the recipe's trainable components declare, in order."""
    names: list[str] = []
    for section, spec in _trainable(recipe):
        names.extend(name for name in spec.params.optimizer_group_names(section) if name not in names)
    return names


def check_optimizer_groups(recipe: ValidatedRecipe, where: str) -> None:
    """Every ``[optimizer.groups.<name>]`` must name a group of the recipe's components.

    Raises:
        RecipeError: A group name no component declares.
    """
    groups = recipe.recipe.optimizer.groups
    names = optimizer_group_names(recipe)
    for name in groups:
        if name not in names:
            raise RecipeError(
                f"optimizer.groups.{name}: no parameter group of that name{did_you_mean(name, names)}",
                where=f"{where}: [optimizer.groups.{name}]",
                fix="groups of this recipe: " + ", ".join(names),
            )
