"""Loading a trained run: its recipe, dataset, test transform and model with the checkpoint's weights.

:func:`load_run` (public as :func:`dmlplug.load_run`) builds the dataset and the model with the same code
as a training run (:func:`~dmlplug.engine.build.build_dataset`, :func:`~dmlplug.engine.build.build_model`),
so a loaded model is exactly the trained one, and any dataset wrapper of the recipe is applied.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmlplug.engine import rundir
from dmlplug.errors import DataError, RunError


@dataclass
class LoadedRun:
    """A trained run, ready to embed images.

    Attributes:
        recipe: The recipe the run was trained with, overrides applied, validated (sections as attributes,
            as :attr:`dmlplug.protocols.RunView.recipe`: ``loaded.recipe.data.image_size``).
        resolved_recipe: The same recipe as a plain nested dict, defaults filled in.
        model: The embedding model in eval mode on the requested device, weights loaded.
        dataset: The :class:`~dmlplug.data.DatasetBundle` built by the recipe's ``[data.dataset]`` (class
            selection and dataset wrappers included).
        test_transform: The transform evaluation uses (resize, crop, normalise).
        checkpoint: The checkpoint file the weights came from.
        run_dir: The run directory, or ``None`` for a checkpoint file outside one.
    """

    recipe: Any
    resolved_recipe: dict[str, Any]
    model: Any
    dataset: Any
    test_transform: Any
    checkpoint: Path
    run_dir: Path | None


def find_checkpoint(path: str | Path, checkpoint: str = "best") -> tuple[Path, Path | None]:
    """``(checkpoint file, run directory or None)`` for a run directory or a checkpoint file.

    In a run directory, ``"best"`` is the checkpoint that holds the run's selected evaluation as every command
    reads it (:func:`dmlplug.evaluation.best.read_best`: ``best.pt``, or ``last.pt`` for an older run whose
    ``best.pt`` holds its untrained model and whose selected trained epoch is the last); otherwise
    ``checkpoints/<checkpoint>.pt`` is taken, else ``best.pt``, else ``last.pt`` (a run that selected nothing,
    e.g. one stopped before its first evaluation, has no ``best.pt``).

    Raises:
        DataError: Nothing usable at ``path``.
    """
    target = Path(path)
    if target.is_file():
        run_dir = target.parent.parent if target.parent.name == rundir.CHECKPOINTS else None
        return target, run_dir
    if target.is_dir() and checkpoint == "best" and (target / rundir.RESULTS).is_file():
        from dmlplug.evaluation.best import read_best

        try:
            selected = read_best(target).checkpoint
        except DataError:  # an unreadable results.json: the files decide, as below
            selected = None
        if selected is not None:
            return selected, target
    if target.is_dir():
        for name in dict.fromkeys((checkpoint, "best", "last")):
            candidate = target / rundir.CHECKPOINTS / f"{name}.pt"
            if candidate.is_file():
                return candidate, target
        raise DataError(f"no checkpoint in run directory {target}", where=str(target / rundir.CHECKPOINTS),
                        fix="give a run directory with a checkpoint, or a .pt checkpoint file")
    raise DataError(f"no run directory or checkpoint at {target}", fix="check the path")


def load_run(path: str | Path, *, checkpoint: str = "best", device: str = "cpu",
             overrides: Sequence[str] = ()) -> LoadedRun:
    """Load a trained run; see :func:`dmlplug.load_run`.

    Raises:
        DataError: No checkpoint at ``path``, the file is not a dmlplug checkpoint, or its weights do not fit
            the model of the recipe (with ``overrides``).
        dmlplug.errors.RecipeError: The stored recipe (with ``overrides``) does not validate.
    """
    from dmlplug.checkpoints import load_checkpoint
    from dmlplug.engine.build import build_dataset, build_model, build_transforms, new_context
    from dmlplug.plugins import get_host
    from dmlplug.recipe import load_recipe

    file, run_dir = find_checkpoint(path, checkpoint)
    try:
        state = load_checkpoint(file, map_location="cpu")
    except RunError as exc:  # damaged, refused or unreadable: its own message says which, and what to use
        raise DataError(exc.what, where=exc.where, fix=exc.fix) from None
    text = state.get("recipe") if isinstance(state, dict) else None
    if not text and run_dir is not None and (run_dir / rundir.RESOLVED_RECIPE).is_file():
        text = (run_dir / rundir.RESOLVED_RECIPE).read_text(encoding="utf-8")
    if not text or not isinstance(state, dict) or "model" not in state:
        raise DataError(f"{file} is not a dmlplug checkpoint with a recipe and model weights", where=str(file),
                        fix="give a run directory or a checkpoint written by `dmlplug run`")
    host = get_host()
    recipe = load_recipe(tomllib.loads(text), list(overrides), registry=host.registry)
    ctx = new_context(recipe, device=device, host=host, run_dir=run_dir)
    dataset = build_dataset(recipe, ctx)
    model = build_model(recipe, ctx)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:  # overrides that change the model's shape
        raise DataError(f"the weights in {file} do not fit the recipe's model: {exc}", where=str(file),
                        fix="drop the overrides that change the backbone or head") from exc
    model.to(device).eval()
    _, test_transform = build_transforms(recipe, dataset, ctx=ctx)
    return LoadedRun(recipe.recipe, recipe.resolved(), model, dataset, test_transform, file, run_dir)
