"""What a search cannot honour, refused before anything is written or trained.

``dmlplug tune validate``, ``dmlplug validate NAME.space.toml`` and ``dmlplug tune run`` all call
:func:`check_search`: the space against the recipe (:func:`.space.check_space`, every combination included), then
what the protocol itself needs of the space and the recipe:

* no searched key the protocol fixes: ``run.epochs`` (every trial reports at steps ``fold * epochs + epoch`` of
  the recipe's epochs, and ``prune_at = "fold"`` looks when a fold's last epoch ends: trials of other lengths
  would report over each other and be pruned mid-fold), nor the ``[data]`` class lists;
* no ``[data] train_classes`` / ``val_classes`` / ``test_classes`` in the recipe: they re-split the dataset after
  the folds are dealt, so every fold would train on the same classes, or name classes a fold does not have;
* ``[tune] metric`` among the metric names the recipe can select on
  (:meth:`dmlplug.recipe.loading.ValidatedRecipe.metric_names`, the list ``dmlplug validate`` checks
  ``[evaluation] metric`` against, re-ranked ``<metric>+<label>`` names included);
* the fold recipe (the dataset wrapped in ``tune_fold``, selecting on the validation fold) validates.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from typing import Any

from dmlplug.errors import RecipeError, did_you_mean

#: ``[data]`` keys that re-split the dataset by class name.
CLASS_LISTS = ("train_classes", "val_classes", "test_classes")
#: Recipe keys a space may not search: key -> (why, how to fix).
FIXED_KEYS = {
    "run.epochs": ("every trial trains the recipe's epochs: the pruner compares trials at step fold * epochs + "
                   "epoch, and prune_at = \"fold\" looks when a fold's last epoch ends, so trials of other lengths "
                   "would report over each other and be pruned mid-fold",
                   "set the epochs in the recipe or with --set run.epochs=N for the whole search; to spend fewer "
                   "epochs on poor trials, let a pruner stop them ([tune.pruner], e.g. a Hyperband pruner)"),
    **{f"data.{name}": ("the folds deal the dataset's training classes; class lists would re-split each fold",
                        "leave the class lists out of a search (docs/tune.md, the protocol)") for name in CLASS_LISTS},
}


def check_search(space: Any, overrides: Sequence[str]) -> tuple[dict[str, Any], list[str], Any]:
    """Check a loaded space for a search.

    Args:
        space: The loaded space (:func:`.space.load_space`).
        overrides: The ``--set`` overrides of every trial, in terms of the plain recipe.

    Returns:
        ``(fold recipe, the overrides in terms of it, the validated fold recipe)``.

    Raises:
        RecipeError: Anything :func:`.space.check_space` refuses, a searched key the protocol fixes, class lists
            in the recipe, a ``[tune] metric`` the recipe cannot select on, or a fold recipe that does not
            validate; nothing has been written.
    """
    import dmlplug
    from dmlplug_builtins.tune.space import check_space
    from dmlplug_builtins.tune.trials import fold_recipe, wrapped_key

    for key in space.params:
        fixed = next((name for name in FIXED_KEYS if key == name or key.startswith((f"{name}[", f"{name}."))), None)
        if fixed is not None:
            why, fix = FIXED_KEYS[fixed]
            raise RecipeError(f"{key} cannot be searched: {why}", where=f"{space.path}: params.\"{key}\"", fix=fix)
    check_space(space, list(overrides))
    plain = dmlplug.validate(str(space.recipe_path), list(overrides))
    _refuse_class_lists(plain, space)
    _check_metric(plain, space)
    recipe = fold_recipe(tomllib.loads(space.recipe_path.read_text(encoding="utf-8")), space.settings)
    forwarded = [wrapped_key(o.partition("=")[0].strip()) + "=" + o.partition("=")[2] for o in overrides]
    return recipe, forwarded, dmlplug.validate(recipe, forwarded)


def _refuse_class_lists(plain: Any, space: Any) -> None:
    data = plain.recipe.data
    given = [name for name in CLASS_LISTS if getattr(data, name, None) is not None]
    if given:
        raise RecipeError(
            f"the recipe sets [data] {', '.join(given)}: they re-split the dataset after the folds are dealt, so "
            "every fold would train and validate on the same classes (or name classes a fold does not have)",
            where=f"{space.recipe_path}: [data] (searched by {space.path})",
            fix="tune a recipe without [data] train_classes / val_classes / test_classes: the folds deal the "
                "dataset's training classes, and its own test classes stay out of the search")


def _check_metric(plain: Any, space: Any) -> None:
    metric, names = space.settings.metric, plain.metric_names()
    if metric in names:
        return
    raise RecipeError(f"[tune] metric = {metric!r} is not computed by the recipe's evaluators"
                      f"{did_you_mean(metric, names)}", where=f"{space.path}: tune.metric",
                      fix=f"use one of {', '.join(names)}" if names else
                      "add an [[evaluators]] table to the recipe that computes it (`dmlplug list evaluators`)")
