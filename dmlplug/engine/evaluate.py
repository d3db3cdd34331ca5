"""Evaluation during a run: what is evaluated when, embedding a split, running the evaluators, recording it.

At every evaluation point (before training, after an epoch) :func:`at_evaluation_point` evaluates the report
split when it is due and then the selection split (:class:`~dmlplug.engine.selection.SplitRoles`; with
``select_on = "last"`` the report split alone, whose latest evaluation is the selection), records both
and updates the best-evaluation tracker; at the end of a run :func:`report_selected` evaluates the selected
checkpoint on the report split when it was not evaluated at its epoch. Under torchrun every rank embeds a shard
and ends with the whole embedding matrix (:func:`dmlplug.engine.distributed.embed_dataset`), so every rank
computes the same metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dmlplug.devices import is_out_of_memory
from dmlplug.engine import distributed, rundir
from dmlplug.engine import pictures as _pictures
from dmlplug.engine.build import Components
from dmlplug.engine.data import TransformedSource
from dmlplug.errors import RunError


def evaluate_split(components: Components, recipe: Any, split: str, *, device: str,
                   autocast: Any = None, rerank: Sequence[Any] = ()) -> tuple[dict[str, float], Any]:
    """Embed ``split`` with the test transform and run every evaluator on it.

    Args:
        components: The built components.
        recipe: The recipe's :class:`~dmlplug.recipe.Recipe` model.
        split: ``"test"`` or ``"val"``.
        device: Where the model runs.
        autocast: CUDA autocast dtype, or ``None``.
        rerank: The recipe's validated re-rankers (:attr:`dmlplug.recipe.ValidatedRecipe.rerank`).

    The embeddings stay on ``device``: on a GPU the kNN search runs there (``[evaluation] backend``).

    With ``[evaluation] rerank`` the kNN metrics are computed again after each re-ranker and added as
    ``<metric>+<label>`` (:func:`dmlplug.evaluation.rerank_eval.rerank_metrics`).

    Returns:
        The merged metrics and the :class:`~dmlplug.evaluation.EvalContext` the plain ones were computed on.

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
    metrics = run_evaluators(evaluators, eval_context)
    if rerank:  # the kNN metrics again after each re-ranker, as <metric>+<label>
        from dmlplug.evaluation.rerank_eval import rerank_metrics

        metrics.update(rerank_metrics(evaluators, eval_context, rerank))
    return metrics, eval_context


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


def at_evaluation_point(run: Any, *, initial: bool = False) -> bool:
    """Evaluate now (``initial``: before training): the report split when due, then the selection split.

    The report split is evaluated first, so that the run's latest metrics (what the learning-rate schedule and
    ``last.pt`` read) are the selection split's. It is due before training, after the last epoch and, with
    ``[evaluation] report_curve``, at every evaluation (:meth:`~dmlplug.engine.selection.SplitRoles.report_due`).

    Returns:
        Whether the selection split's evaluation was selected as the best so far (``best.pt`` is due).
    """
    roles, reported = run.splits, None
    if roles.report_due(run.epoch, run.recipe.recipe.run.epochs, initial):
        reported, _ = evaluate_and_record(run, roles.report, initial=initial)
    return evaluate_and_record(run, roles.evaluated, initial=initial, reported=reported)[1]


def evaluate_and_record(run: Any, split: str, *, initial: bool = False,
                        reported: dict[str, float] | None = None) -> tuple[dict[str, float], bool]:
    """Evaluate ``split`` now and record it; returns its metrics and whether they were selected as best.

    The metrics are appended to ``metrics.jsonl`` (rank 0) and become the run's latest; on the report split
    also its latest report (and with ``initial`` its initial metrics); on the selection split they update the
    best-evaluation tracker (with ``reported``, the report split's metrics of the same weights, when known).
    Then the retrieval pictures are drawn and ``on_eval_end`` is called, so hooks see a view where all of these
    are current.
    """
    metrics = evaluate_safely(run.evaluate, split, model=run.components.model, recipe=run.recipe.recipe,
                              checkpoint_dir=run.checkpoint_dir)
    if run.dist.is_main:
        rundir.append_metrics(run.directory, {"epoch": run.epoch, "step": run.step, "split": split,
                                              "time": time.time(), **metrics})
    run.last_metrics = metrics
    roles, selected = run.splits, False
    if split == roles.report:
        run.best.record_report(metrics, run.epoch)
        reported = metrics
        if initial:
            run.initial_metrics = metrics
    if split == roles.evaluated:  # the selection split, or with select_on = "last" the report split (latest wins)
        selected = run.best.update(metrics, run.epoch, step=run.step, reported=reported)
    _pictures.at_evaluation(run, split)  # before on_eval_end: loggers read run.latest_pictures
    run.host.pm.hook.on_eval_end(run=run.view, epoch=run.epoch, split=split, metrics=metrics)
    return metrics, selected


def report_selected(run: Any) -> dict[str, float] | None:
    """At the end of a completed run: the report split's metrics of the selected checkpoint, when not yet known.

    That is when the report split is not the selection split and was not evaluated at the selected epoch. Rank 0
    loads ``best.pt``'s weights and sends them to every rank; the report split is evaluated and the trained
    weights are put back. The evaluation is appended to ``metrics.jsonl`` with the checkpoint's epoch and step
    and ``"report": "selected"``, and becomes ``best_metrics``; it is not passed to the loggers (it is not an
    evaluation of the epoch just trained) and keeps the run's latest metrics and evaluation context.

    Returns:
        The metrics, or ``None`` when nothing had to be evaluated.
    """
    import torch

    from dmlplug.checkpoints import load_checkpoint

    best, split = run.best, run.splits.report
    if best.epoch is None or best.reported is not None:
        return None
    model = run.components.model
    # A copy on the host: no second set of weights on the device.
    trained = {key: value.detach().to("cpu", copy=True) if torch.is_tensor(value) else value
               for key, value in model.state_dict().items()}
    if run.dist.is_main:
        model.load_state_dict(load_checkpoint(run.checkpoint_dir / "best.pt", map_location="cpu")["model"])
    distributed.broadcast_module(model)
    try:
        metrics = evaluate_safely(
            lambda name: evaluate_split(run.components, run.recipe.recipe, name, device=run.device,
                                        autocast=run.training.autocast, rerank=run.recipe.rerank)[0],
            split, model=model, recipe=run.recipe.recipe, checkpoint_dir=run.checkpoint_dir)
    finally:
        model.load_state_dict(trained)
    best.reported = metrics
    if run.dist.is_main:
        rundir.append_metrics(run.directory, {"epoch": best.epoch, "step": best.step, "split": split,
                                              "time": time.time(), "report": "selected", **metrics})
    return metrics
