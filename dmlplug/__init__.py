"""dmlplug: plugin-based deep metric learning on pytorch-metric-learning.

The public surface for users and plugin authors. Importing this package never imports torch;
heavy modules are imported by the functions that need them.

Example::

    import dmlplug
    result = dmlplug.run("recipes/quickstart.toml", overrides=["run.epochs=1"])
    loss = dmlplug.create("loss", "arcface", num_classes=10, embedding_size=64)
    trained = dmlplug.load_run(result.directory)   # model, dataset, test transform of the trained run
    dmlplug.export(result.directory, "bundle")       # model.onnx + bundle.json (docs/bundle.md)
    matches = dmlplug.load_bundle("bundle").search(["query.png"], "index_dir")
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pluggy

from dmlplug.context import BuildContext
from dmlplug.distributions import DMLPLUG_VERSION
from dmlplug.params import Params
from dmlplug.tables import ComponentTable, TableOf, default_table

__version__ = DMLPLUG_VERSION

hookimpl = pluggy.HookimplMarker("dmlplug")

__all__ = ["BuildContext", "ComponentTable", "Params", "TableOf", "__version__", "check_data", "create",
           "default_table", "evaluate", "export", "hookimpl", "load_bundle", "load_run", "plugin_host", "read_value",
           "recipe_field", "run", "validate"]


def run(recipe: Any, overrides: list[str] | dict[str, Any] | None = None, **options: Any) -> Any:
    """Validate a recipe and train it; returns the :class:`dmlplug.engine.run.RunResult`.

    Args:
        recipe: Path to a TOML recipe, or a dict with the same structure.
        overrides: ``"section.key=value"`` strings (as ``--set``) or a ``{"section.key": value}`` dict.
        **options: ``out`` (output directory), ``device``, ``quiet`` (``True``: the console logger prints
            nothing, neither a progress bar nor the evaluation lines; errors are still raised), ``hooks``
            (objects with ``@hookimpl`` lifecycle methods registered for this run only, like its loggers: an
            ``on_eval_end`` that raises stops the run, which ends failed with that error).
    """
    from dmlplug.engine.launch import run_recipe
    from dmlplug.plugins import get_host

    return run_recipe(recipe, overrides=overrides, **{"host": get_host(), **options})


def validate(recipe: Any, overrides: list[str] | dict[str, Any] | None = None) -> Any:
    """Parse and validate a recipe without building anything; returns the validated recipe."""
    from dmlplug.plugins import get_host
    from dmlplug.recipe import load_recipe

    return load_recipe(recipe, overrides=overrides, registry=get_host().registry)


def read_value(text: str) -> Any:
    """The value of a ``KEY=VALUE`` command-line item, as ``--set`` reads it: TOML if it parses, else the text.

    ``"3"`` -> 3, ``"[1, 5]"`` -> [1, 5], ``"true"`` -> True, ``"cpu"`` -> "cpu" (bare words need no quotes).
    Plugins read their own ``KEY=VALUE`` options with it, so that every command reads values alike.
    """
    from dmlplug.recipe.overrides import read_value as _read_value

    return _read_value(text)


def recipe_field(recipe: Any, key: str, overrides: list[str] | dict[str, Any] | None = None) -> Any:
    """The field a recipe key sets: its owner, type, current value and its own bounds (``ge``/``gt``/``le``/``lt``).

    Tools that vary recipe keys (``dmlplug tune`` search spaces) check a key and its range before anything runs.

    Args:
        recipe: Path to a TOML recipe, a dict with the same structure, or a :func:`validate` result.
        key: A recipe key as ``--set`` writes it: ``loss.margin``, ``regularizers[0].weight``, ``data.sampler.m``.
        overrides: Overrides applied before the lookup (ignored for a :func:`validate` result).

    Returns:
        A :class:`dmlplug.recipe.fields.RecipeField` (``key``, ``owner``, ``annotation``, ``value``, ``bounds``,
        ``description``).

    Raises:
        dmlplug.errors.RecipeError: The recipe is invalid or has no such key (with "did you mean").
    """
    from dmlplug.recipe.fields import recipe_field as _recipe_field

    validated = recipe if hasattr(recipe, "components") else validate(recipe, overrides)
    return _recipe_field(validated, key)


def create(kind: str, name: str, ctx: BuildContext | None = None, **params: Any) -> Any:
    """Build any registered component, like ``timm.create_model``.

    Args:
        kind: Component kind, singular or plural (``"loss"``, ``"losses"`` ...).
        name: Registered name (``"arcface"``).
        ctx: Optional :class:`dmlplug.context.BuildContext` (it is not modified); context fields may also be
            given as keyword arguments (``num_classes=10``, ``train_super_labels=...``), everything else is a
            component parameter. Without a host in the context, the process-wide plugin host builds it.
        **params: Component parameters and/or context fields.

    Raises:
        dmlplug.errors.ComponentError: No component of that kind and name.
        dmlplug.errors.RecipeError: A parameter is invalid.
    """
    import dataclasses

    from dmlplug.plugins import get_host
    from dmlplug.tables import validate_table

    base = ctx if ctx is not None else BuildContext()
    if base.host is None:  # the public entry point: the process's host, as the dmlplug command uses
        base = base.changed(host=get_host())
    registry = base.registry()
    info = registry.get(kind, name)
    context_fields = {f.name for f in dataclasses.fields(BuildContext)}
    changes = {k: params.pop(k) for k in list(params) if k in context_fields and k not in info.params.model_fields}
    table = validate_table(kind, {**params, "name": info.name}, where=f"{info.kind}.{name}", registry=registry)
    return table.build(base.changed(**changes))


def plugin_host() -> Any:
    """The plugin host of this process (built-ins and installed plugins), loaded on first use.

    It is what the ``dmlplug`` command runs with. Library code takes a host or a registry as an argument and never
    reaches for this one; an entry point starts from it: a plugin's command (``register_commands``), a script, a
    notebook (``dmlplug.plugin_host().registry``).
    """
    from dmlplug.plugins import get_host

    return get_host()


def evaluate(embeddings: Any, labels: Any, evaluators: list[Any] | None = None, **options: Any) -> dict[str, float]:
    """Evaluate embeddings with registered evaluators; returns one flat ``{metric: value}`` dict.

    Args:
        embeddings: ``N×D`` array or tensor.
        labels: ``N`` integer labels.
        evaluators: Evaluator names or ``{"name": ..., **params}`` dicts; defaults to recall@1/2/4/8,
            map@r and r_precision.
        **options: Passed to :class:`dmlplug.evaluation.EvalContext` (``query_mask``, ``gallery_mask``,
            ``backend`` ...).
    """
    from dmlplug.evaluation.api import evaluate as _evaluate

    return _evaluate(embeddings, labels, evaluators=evaluators, **options)


def load_run(path: str | Path, *, checkpoint: str = "best", device: str = "cpu",
             overrides: Sequence[str] = ()) -> Any:
    """Load a trained run: its recipe, dataset, test transform and model with the checkpoint's weights.

    The dataset and model are built exactly as the training run built them (same recipe, same code), so
    ``loaded.model`` embeds images as the trained model did. Only the dataset, backbone and head are built.

    Example::

        loaded = dmlplug.load_run("runs/quickstart/20250101-120000")
        image = loaded.dataset.test.load_image(0)
        embedding = loaded.model.embed(loaded.test_transform(image)[None])

    Args:
        path: A run directory, or a checkpoint file (``.pt``) written by ``dmlplug run``.
        checkpoint: In a run directory, which checkpoint: ``"best"`` or ``"last"`` (the other one is taken
            when it is missing).
        device: Where the model is placed (``"cpu"``, ``"cuda"`` …).
        overrides: ``"section.key=value"`` changes to the stored recipe (e.g. a dataset ``root`` on
            another machine).

    Returns:
        A ``LoadedRun`` with ``recipe`` (validated, sections as attributes), ``resolved_recipe`` (a dict),
        ``model`` (eval mode),
        ``dataset``, ``test_transform``, ``checkpoint`` (the file used) and ``run_dir`` (``None`` for a
        checkpoint file outside a run directory).

    Raises:
        dmlplug.errors.DataError: Nothing loadable at ``path``, or the weights do not fit the recipe.
        dmlplug.errors.RecipeError: The stored recipe (with ``overrides``) does not validate.
    """
    from dmlplug.engine.trained_run import load_run as _load_run

    return _load_run(path, checkpoint=checkpoint, device=device, overrides=overrides)


def check_data(recipe: Any, overrides: list[str] | dict[str, Any] | None = None) -> dict[str, int]:
    """Build a recipe's dataset and batch sampler as ``dmlplug run`` would, then drop them; nothing is trained.

    ``dmlplug validate`` reads only the recipe; this also reads the data, so it finds what only the data can
    show (a missing folder, a split too small for the sampler) in seconds, before any model is built. Sweeps
    call it for every split before their first run.

    Args:
        recipe: Path to a TOML recipe, or a dict with the same structure.
        overrides: ``"section.key=value"`` strings (as ``--set``) or a ``{"section.key": value}`` dict.

    Returns:
        ``{"train_classes", "train_images", "steps_per_epoch"}``.

    Raises:
        dmlplug.errors.RecipeError: The recipe does not validate.
        dmlplug.errors.DataError, dmlplug.errors.ComponentError, dmlplug.errors.RunError: The errors ``dmlplug
            run`` raises for this recipe before it builds the model.
    """
    from dmlplug.engine.build import check_data as _check_data
    from dmlplug.engine.build import new_context
    from dmlplug.plugins import get_host
    from dmlplug.recipe import load_recipe

    host = get_host()
    validated = load_recipe(recipe, overrides=overrides, registry=host.registry)
    return _check_data(validated, new_context(validated, device="cpu", host=host, quiet=True))


def export(run_dir: str | Path, out: str | Path, *, checkpoint: str = "best", format: str = "onnx",
           images: int = 256, tolerance: float = 1e-4, device: str = "cpu", calibrate: bool = True,
           allow_untrained: bool = False, log_model: bool = False) -> dict[str, Any]:
    """Export a trained run as a bundle folder: the embedding model and ``bundle.json`` (docs/bundle.md).

    The model is backbone + head + L2 normalisation, the embedding evaluation uses, as ``model.onnx`` (dynamic
    batch axis) or ``model.pt`` (TorchScript). ``bundle.json`` records the dmlplug version, the source run and
    checkpoint (with its sha256), the test-time preprocessing, the embedding size, the similarity (cosine),
    the calibrated thresholds and the verification. The folder appears only when everything succeeded.

    Example::

        dmlplug.export("runs/quickstart/20250101-120000", "bundles/quickstart")

    Args:
        run_dir: A run directory, or a checkpoint file (then no thresholds are calibrated).
        out: The bundle folder to create; it must not exist, or be empty.
        checkpoint: ``"best"`` or ``"last"``.
        format: ``"onnx"`` (needs ``pip install "dmlplug[export]"``) or ``"torchscript"``.
        images: Test images the exported model is compared with PyTorch on.
        tolerance: Largest max |Δ embedding| accepted.
        device: Where the models run while exporting and verifying.
        calibrate: Calibrate the acceptance thresholds (:mod:`dmlplug.bundle.calibrate`).
        allow_untrained: Export a checkpoint written before any training step (refused otherwise).
        log_model: Once the bundle is written, log it as a model to the run's experiment tracker (the ``mlflow``
            logger's MLflow run: docs/monitoring.md), through the plugins' ``on_bundle_exported`` hook.

    Returns:
        The written ``bundle.json`` as a dict.

    Raises:
        dmlplug.bundle.errors.BundleError: ONNX packages missing, ``out`` not new, the checkpoint is the untrained
            model (without ``allow_untrained``), or the exported model differs from PyTorch by more than
            ``tolerance`` (nothing is written); or, after the bundle was written (it stays), a plugin failed in
            ``on_bundle_exported`` or ``log_model`` was asked and no plugin logged the bundle.
        dmlplug.errors.DataError: No loadable run at ``run_dir``.
    """
    from dmlplug.bundle.export import export_run

    return export_run(run_dir, out, checkpoint=checkpoint, format=format, images=images, tolerance=tolerance,
                      device=device, calibrate=calibrate, allow_untrained=allow_untrained, log_model=log_model)


def load_bundle(path: str | Path, *, device: str = "cpu") -> Any:
    """Load a bundle written by :func:`export`, to embed images and search an index.

    Example::

        bundle = dmlplug.load_bundle("bundles/quickstart")
        vectors = bundle.embed(["a.png", "b.png"])            # N×D float32, unit length
        results = bundle.search(["query.png"], "gallery_index", k=5)

    Args:
        path: The bundle folder.
        device: ``"cpu"`` or a GPU (ONNX Runtime uses its CUDA provider when installed).

    Returns:
        A :class:`dmlplug.bundle.bundle.Bundle`: ``embed(images)``, ``search(queries, index, k=...)``,
        ``build_index(images)``, ``threshold``, ``manifest``.

    Raises:
        dmlplug.bundle.errors.BundleError: Not a bundle, another bundle format version, a missing file, or a
            model file that is damaged or not the one ``bundle.json`` records (size and sha256 checked once per
            process and file version).
    """
    from dmlplug.bundle.bundle import load_bundle as _load_bundle

    return _load_bundle(path, device=device)
