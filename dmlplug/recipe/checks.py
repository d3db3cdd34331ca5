"""Checks across sections that components answer from their parameters, without building anything.

Each check asks the components' :class:`~dmlplug.params.Params` a question (which metrics an evaluator
produces, whether a dataset has a validation split, how big its splits are, which batch sizes a sampler takes and
how many samples of a class it puts in a batch, which optimizer groups a component has). A component that
declares nothing answers with the default, which is what the engine does with it, so every check runs for every
plugin (only a dataset may answer "the data decides", and the run then checks the same after building it).
:func:`check_recipe` runs them all; :func:`dmlplug.recipe.load_recipe` calls it after the capability checks,
so ``dmlplug validate`` rejects these mistakes before a run builds anything. What is legal but unusual is a
warning (:func:`recipe_warnings`), logged to the ``dmlplug.recipe`` logger: without a logging configuration
Python prints it on stderr, so ``dmlplug validate`` shows it above its "OK".
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dmlplug.errors import RecipeError, did_you_mean
from dmlplug.params import MIN_SPLIT_CLASSES, SplitSize
from dmlplug.recipe.capabilities import component_tags
from dmlplug.registry import singular

if TYPE_CHECKING:
    from dmlplug.recipe.loading import ComponentSpec, ValidatedRecipe

log = logging.getLogger("dmlplug.recipe")


def check_recipe(recipe: ValidatedRecipe, where: str) -> None:
    """Run every parameter-level check of :mod:`dmlplug.recipe.checks`; each runs whatever the others found.

    Raises:
        RecipeError: The mistake found, with where it is and how to fix it; several found are one
            :class:`~dmlplug.recipe.mistakes.RecipeMistakes` listing each.
    """
    from dmlplug.recipe.mistakes import Mistakes

    mistakes = Mistakes()
    # Within a step a check runs only when the one before it passed: the classes of a batch are counted for a batch
    # size the sampler takes, the followers of the selection metric for a selection split the dataset has.
    steps = ((check_selection_metric,), (check_validation_split, check_followers), (check_split_sizes,),
             (check_batch_size, check_classes_per_batch), (check_optimizer_groups,))
    for step in steps:
        with mistakes.collect():
            for check in step:
                check(recipe, where)
    mistakes.raise_if_any(where)
    for warning in recipe_warnings(recipe, where):
        log.warning("%s", warning)


def evaluator_metric_names(recipe: ValidatedRecipe) -> list[str]:
    """Every metric name the recipe's evaluators declare, in order, then their ``+<label>`` re-ranked variants."""
    names: list[str] = []
    neighbour_names: list[str] = []
    for spec in recipe.list_components("evaluators"):
        declared = [name for name in spec.params.metric_names() if name not in names]
        names.extend(declared)
        if spec.params.reads_neighbours():
            neighbour_names.extend(declared)
    # [evaluation] rerank reports the kNN metrics (only those: Params.reads_neighbours) again as <metric>+<label>
    # (dmlplug.evaluation.rerank_eval).
    return names + [f"{name}+{spec.label}" for spec in recipe.rerank for name in neighbour_names]


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
    """``[evaluation] select_on`` / ``report_on = "val"`` need a dataset with a validation split.

    Raises:
        RecipeError: The dataset's parameters (or ``[data]`` class lists) say it has none.
    """
    from dmlplug.engine.selection import check_declared_splits

    dataset = recipe.component("data.dataset")
    check_declared_splits(recipe.recipe.evaluation, has_validation_split(recipe),
                          dataset.name if dataset is not None else "?", where)


def metric_followers(recipe: ValidatedRecipe) -> list[str]:
    """The components that follow the selection metric (``requires`` ``"selection_metric"``), for messages."""
    return [f"{singular(recipe.components[path].info.kind)} {recipe.components[path].name!r} ({path})"
            for path in recipe.needs.by.get("selection_metric", [])]


def check_followers(recipe: ValidatedRecipe, where: str) -> None:
    """A component that follows the selection metric (a plateau schedule) needs a run that selects by a metric.

    Raises:
        RecipeError: The run would select the last epoch (no validation split, ``select_on`` not ``"test"``).
    """
    from dmlplug.engine.selection import check_metric_followers

    dataset = recipe.component("data.dataset")
    check_metric_followers(recipe.recipe.evaluation, has_validation_split(recipe), metric_followers(recipe),
                           dataset.name if dataset is not None else "?", where, parameter=validation_parameter(recipe))


def describe_recipe_selection(recipe: ValidatedRecipe) -> str:
    """Which split selects the recipe's ``best.pt`` and why, in one sentence (``dmlplug validate`` prints it)."""
    from dmlplug.engine.selection import describe_selection

    dataset = recipe.component("data.dataset")
    return describe_selection(recipe.recipe.evaluation, has_validation_split(recipe),
                              dataset.name if dataset is not None else "?", validation_parameter(recipe))


def validation_parameter(recipe: ValidatedRecipe) -> str | None:
    """The dataset's parameter that carves validation classes (``Params.validation_parameter()``), or ``None``.

    ``None`` too when ``[data] train_classes`` re-splits the dataset: ``[data] val_classes`` is the way then.
    """
    dataset = recipe.component("data.dataset")
    if dataset is None or recipe.recipe.data.train_classes is not None:
        return None
    return dataset.params.validation_parameter()


def split_sizes(recipe: ValidatedRecipe) -> dict[str, SplitSize] | None:
    """The size of every split of the run's dataset as far as the recipe tells; ``None`` when it cannot.

    ``[data] train_classes`` / ``test_classes`` / ``val_classes`` re-split the dataset: their lengths are the class
    counts (the images of the smallest class are then unknown); otherwise the dataset's ``Params.split_sizes()``.
    """
    data = recipe.recipe.data
    if data.train_classes is not None and data.test_classes is not None:
        lists = {"train": data.train_classes, "test": data.test_classes, "val": data.val_classes or []}
        return {split: SplitSize(len(names)) for split, names in lists.items() if names}
    dataset = recipe.component("data.dataset")
    return dataset.params.split_sizes() if dataset is not None else None


def check_split_sizes(recipe: ValidatedRecipe, where: str) -> None:
    """The training split and every evaluated split need two classes (the report and the selection split).

    With one training class a pair loss has no negative; with one evaluated class every neighbour is of the
    query's class, and recall is 1.0 before training. The run checks the same once the data is built
    (:func:`dmlplug.data.splits.check_split_sizes`) when the parameters cannot tell.

    Raises:
        RecipeError: A split the dataset declares (``Params.split_sizes()``) or ``[data]`` lists has fewer than two
            classes.
    """
    from dmlplug.engine.selection import evaluated_splits

    sizes = split_sizes(recipe) or {}
    for split in ("train", *evaluated_splits(recipe.recipe.evaluation, has_validation_split(recipe))):
        size = sizes.get(split)
        if size is None or size.classes >= MIN_SPLIT_CLASSES:
            continue
        if recipe.recipe.data.train_classes is not None:
            at, fix = f"[data] {split}_classes", f"list at least {MIN_SPLIT_CLASSES} classes in [data] {split}_classes"
        else:
            dataset = recipe.components["data.dataset"]
            at = f"[data.dataset] ({dataset.info.label})"
            fix = (f"change the dataset's parameters so that its {split} split has at least {MIN_SPLIT_CLASSES} "
                   f"classes (`dmlplug list datasets {dataset.name}`)")
        raise RecipeError(
            f"the {split} split would have {size.classes} class{'' if size.classes == 1 else 'es'}, fewer than the "
            f"{MIN_SPLIT_CLASSES} a run needs ("
            + ("a loss needs a negative from another class" if split == "train" else
               "with one class every neighbour is of the query's class: recall 1.0 before training") + ")",
            where=f"{where}: {at}", fix=fix,
        )


def _two_class_batch(multiple: int, per_class: int | None) -> int:
    # The smallest batch size that is a multiple of the sampler's group and holds two classes.
    least = MIN_SPLIT_CLASSES * per_class if per_class else multiple
    return -(-least // multiple) * multiple


def check_batch_size(recipe: ValidatedRecipe, where: str) -> None:
    """``[data] batch_size`` must be a multiple of what the sampler groups by (``m`` of ``m_per_class``).

    The sizes suggested hold at least two classes (:func:`check_classes_per_batch` refuses fewer).

    Raises:
        RecipeError: The batch size is not a multiple of the sampler's group size.
    """
    sampler = recipe.component("data.sampler")
    multiple = sampler.params.batch_size_multiple() if sampler is not None else 1
    batch_size = recipe.recipe.data.batch_size
    if sampler is None or batch_size % multiple == 0:
        return
    smallest = _two_class_batch(multiple, sampler.params.per_class_in_batch())
    lower = batch_size - batch_size % multiple
    sizes = [size for size in (lower, lower + multiple) if size >= smallest] or [smallest]
    raise RecipeError(
        f"[data] batch_size = {batch_size} is not a multiple of {multiple}, the group size of sampler "
        f"{sampler.name!r}",
        where=f"{where}: [data] batch_size and [data.sampler]",
        fix=f"use batch_size = {' or '.join(map(str, sizes))}, or change the sampler's parameters "
            "(`dmlplug list samplers --params`)",
    )


def _needs_negatives(recipe: ValidatedRecipe) -> list[str]:
    # Who learns from pairs of samples of the batch: a loss without class proxies (proxies are negatives of
    # their own), and every miner (it mines pairs or triplets of the batch).
    loss, miner = recipe.component("loss"), recipe.component("miner")
    who = [f"loss {loss.name!r}"] if loss is not None and "proxies" not in component_tags(loss) else []
    return who + ([f"miner {miner.name!r}"] if miner is not None else [])


def check_classes_per_batch(recipe: ValidatedRecipe, where: str) -> None:
    """A sampler that groups by class must leave two classes in a batch when the loss learns from pairs.

    ``batch_size // Params.per_class_in_batch()`` classes share a batch (``m_per_class`` with ``m = 64`` and
    ``batch_size = 64``: one); a loss without the ``proxies`` tag, or a miner, then finds no negative pair.

    Raises:
        RecipeError: A batch holds fewer than two classes and the loss or a miner compares its samples.
    """
    sampler = recipe.component("data.sampler")
    per_class = sampler.params.per_class_in_batch() if sampler is not None else None
    batch_size = recipe.recipe.data.batch_size
    who = _needs_negatives(recipe)
    if sampler is None or per_class is None or batch_size // per_class >= MIN_SPLIT_CLASSES or not who:
        return
    smallest = _two_class_batch(sampler.params.batch_size_multiple(), per_class)
    raise RecipeError(
        f"every batch holds at most {batch_size // per_class} class ([data] batch_size = {batch_size}, sampler "
        f"{sampler.name!r} takes {per_class} samples of each class), so {' and '.join(who)} "
        f"{'has' if len(who) == 1 else 'have'} no negative pair to learn from",
        where=f"{where}: [data] batch_size and [data.sampler]",
        fix=f"use batch_size = {smallest} or more (at least {MIN_SPLIT_CLASSES} classes per batch), or at most "
            f"{batch_size // MIN_SPLIT_CLASSES} samples per class in [data.sampler] (`dmlplug list samplers --params`)",
    )


def recipe_warnings(recipe: ValidatedRecipe, where: str) -> list[str]:
    """What the recipe allows but probably does not mean, one message (what / where / fix) each.

    A sampler that takes more images of a class per batch than the smallest training class has (the dataset's
    ``Params.split_sizes()``) repeats that class's images in every batch that holds it; the sampler warns the
    same when it is built, from the labels, where the parameters cannot tell.
    """
    sampler, sizes = recipe.component("data.sampler"), split_sizes(recipe) or {}
    per_class = sampler.params.per_class_in_batch() if sampler is not None else None
    train = sizes.get("train")
    if sampler is None or per_class is None or train is None or train.min_images is None \
            or per_class <= train.min_images:
        return []
    dataset = recipe.components["data.dataset"]
    return [f"warning: sampler {sampler.name!r} takes {per_class} images of a class per batch, but the smallest "
            f"training class of dataset {dataset.name!r} has {train.min_images}: its images repeat in every batch "
            f"that holds it\n  where: {where}: [data.sampler] and [data.dataset]\n"
            f"  fix:   take at most {train.min_images} samples per class, or give the classes more images"]


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
