"""dmlplug: plugin-based deep metric learning on pytorch-metric-learning.

The public surface for users and plugin authors. Importing this package never imports torch;
heavy modules are imported by the functions that need them.

Example::

    import dmlplug
    result = dmlplug.run("recipes/quickstart.toml", overrides=["run.epochs=1"])
    loss = dmlplug.create("loss", "arcface", num_classes=10, embedding_size=64)
"""

from __future__ import annotations

from typing import Any

import pluggy

from dmlplug.params import Params

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("dmlplug")

__all__ = ["Params", "__version__", "create", "evaluate", "hookimpl", "run", "validate"]


def run(recipe: Any, overrides: list[str] | dict[str, Any] | None = None, **options: Any) -> Any:
    """Validate a recipe and train it; returns the :class:`dmlplug.engine.run.RunResult`.

    Args:
        recipe: Path to a TOML recipe, or a dict with the same structure.
        overrides: ``"section.key=value"`` strings (as ``--set``) or a ``{"section.key": value}`` dict.
        **options: ``out`` (output directory), ``device``, ``quiet``.
    """
    from dmlplug.engine.launch import run_recipe

    return run_recipe(recipe, overrides=overrides, **options)


def validate(recipe: Any, overrides: list[str] | dict[str, Any] | None = None) -> Any:
    """Parse and validate a recipe without building anything; returns the validated recipe."""
    from dmlplug.recipe import load_recipe

    return load_recipe(recipe, overrides=overrides)


def create(kind: str, name: str, ctx: Any = None, **params: Any) -> Any:
    """Build any registered component, like ``timm.create_model``.

    Args:
        kind: Component kind, singular or plural (``"loss"``, ``"losses"`` ...).
        name: Registered name (``"arcface"``).
        ctx: Optional :class:`dmlplug.context.BuildContext`; context fields may also be given as
            keyword arguments (``num_classes=10``), everything else is a component parameter.
        **params: Component parameters and/or context fields.
    """
    from dataclasses import fields

    from dmlplug.context import BuildContext
    from dmlplug.plugins import get_host

    host = get_host()
    info = host.registry.get(kind, name)
    context_fields = {f.name for f in fields(BuildContext)}
    ctx_values = {k: params.pop(k) for k in list(params) if k in context_fields and k not in info.params.model_fields}
    if ctx is None:
        ctx = BuildContext(host=host, **ctx_values)
    else:
        for key, value in ctx_values.items():
            setattr(ctx, key, value)
    return info.build(info.validate(params, where=f"{info.kind}.{name}"), ctx)


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
