"""Evaluation during a run: embed a split, build its :class:`~dmlplug.evaluation.EvalContext`, run the evaluators.

Under torchrun every rank embeds a shard and ends with the whole embedding matrix
(:func:`dmlplug.engine.distributed.embed_dataset`), so every rank computes the same metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dmlplug.devices import is_out_of_memory
from dmlplug.engine import distributed
from dmlplug.engine.build import Components
from dmlplug.engine.data import TransformedSource
from dmlplug.errors import RunError


def evaluate_split(components: Components, recipe: Any, split: str, *, device: str,
                   autocast: Any = None) -> tuple[dict[str, float], Any]:
    """Embed ``split`` with the test transform and run every evaluator on it.

    Args:
        components: The built components.
        recipe: The recipe's :class:`~dmlplug.recipe.Recipe` model.
        split: ``"test"`` or ``"val"``.
        device: Where the model runs.
        autocast: CUDA autocast dtype, or ``None``.

    The embeddings stay on ``device``: on a GPU the kNN search runs there (``[evaluation] backend``).

    Returns:
        The merged metrics and the :class:`~dmlplug.evaluation.EvalContext` they were computed on.

    Raises:
        DataError: A kNN evaluator is selected and no query of the split has another item of its class in
            the gallery (as ``dmlplug evaluate`` refuses it).
    """
    from dmlplug.evaluation import EvalContext, run_evaluators
    from dmlplug.evaluation.api import check_valid_queries

    c, data = components, recipe.data
    embeddings, labels = distributed.embed_dataset(
        c.model, TransformedSource(getattr(c.dataset, split), c.test_transform), batch_size=data.eval_batch_size,
        workers=data.workers, device=device, autocast=autocast)
    masks = {}
    if split == "test" and c.dataset.test_query_mask is not None:
        masks = {"query_mask": c.dataset.test_query_mask, "gallery_mask": c.dataset.test_gallery_mask}
    eval_context = EvalContext(embeddings, labels, backend=recipe.evaluation.backend,
                      memory_budget_mb=recipe.evaluation.memory_budget_mb, seed=recipe.run.seed, **masks)
    evaluators = [ev for _, ev in c.evaluators]
    check_valid_queries(evaluators, eval_context,
                        where=f"the {split} split of [data.dataset] {data.dataset.get('name')!r}")
    return run_evaluators(evaluators, eval_context), eval_context


def evaluate_safely(evaluate: Callable[[str], dict[str, float]], split: str, *, model: Any, recipe: Any,
                    checkpoint_dir: Path) -> dict[str, float]:
    """``evaluate(split)`` with BatchNorm buffers synchronised across ranks first and out-of-memory explained.

    Raises:
        RunError: The evaluation ran out of memory (names the settings to lower).
    """
    distributed.broadcast_module(model, buffers_only=True)
    try:
        return evaluate(split)
    except (MemoryError, RuntimeError) as exc:
        if not is_out_of_memory(exc):
            raise
        batch = recipe.data.eval_batch_size
        raise RunError(
            f"out of memory while evaluating the {split} split: {type(exc).__name__}",
            where="[data] eval_batch_size / [evaluation] memory_budget_mb",
            fix=f"lower data.eval_batch_size (now {batch}) or evaluation.memory_budget_mb "
                f"(now {recipe.evaluation.memory_budget_mb}), e.g. --set data.eval_batch_size="
                f"{max(1, batch // 2)}; the last checkpoint is kept in {checkpoint_dir}",
        ) from exc


def write_artifacts(components: Components, eval_context: Any, directory: Path) -> list[Path]:
    """The evaluators' files of the last evaluation (``write_artifacts``); nothing before any evaluation."""
    from dmlplug.evaluation.runner import write_all_artifacts

    if eval_context is None:
        return []
    return write_all_artifacts([ev for _, ev in components.evaluators], eval_context, directory)
