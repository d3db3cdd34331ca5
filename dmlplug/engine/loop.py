"""The epoch loop: initial evaluation, epochs of steps, periodic evaluation, schedule, checkpoints, interruption.

Functions over a built :class:`~dmlplug.engine.run.Run`; a resumed run continues at its checkpointed
position (no initial evaluation again, the batches already trained in the epoch skipped).
"""

from __future__ import annotations

import signal
from typing import Any

import torch

from dmlplug.engine import distributed, state
from dmlplug.engine import evaluate as _evaluate
from dmlplug.engine import resume as _resume
from dmlplug.engine.model import freeze_backbone
from dmlplug.evaluation.best import LAST


def execute(run: Any) -> Any:
    """Initial evaluation, epochs with periodic evaluation, the selected checkpoint's report; returns the result.

    What is evaluated when: :func:`dmlplug.engine.evaluate.at_evaluation_point`; then the evaluator artifacts.

    Raises:
        RunError: Training failed (see the train step).
        dmlplug.engine.resume.RunInterrupted: SIGTERM/SIGINT arrived; a checkpoint was written first.
    """
    r = run.recipe.recipe
    first, skip = 1, 0
    if run.resumed:
        first = run.epoch + 1 if run.epoch_complete else run.epoch
        skip = 0 if run.epoch_complete else run.epoch_step
    elif r.evaluation.initial or r.run.epochs == 0:
        state.checkpoint(run, _evaluate.at_evaluation_point(run, initial=True))
    for epoch in range(first, r.run.epochs + 1):
        if distributed.any_rank(run.stop_signal is not None):  # arrived during an evaluation
            state.checkpoint(run, False)
            raise_interrupted(run)
        run.epoch = epoch
        run.host.pm.hook.on_epoch_start(run=run.view, epoch=epoch)
        train_epoch(run, skip)
        skip = 0
        evaluate_now = epoch % r.evaluation.every == 0 or epoch == r.run.epochs
        improved = _evaluate.at_evaluation_point(run) if evaluate_now else False
        step_schedule(run, evaluate_now)
        run.epoch_complete = True
        state.checkpoint(run, evaluate_now and improved)
    _evaluate.report_selected(run)
    if run.dist.is_main:
        run.write_artifacts()
    return run.result("completed")


def train_epoch(run: Any, skip: int = 0) -> None:
    """One pass over the epoch's batches; the first ``skip`` were trained before a resume.

    Writes a mid-epoch checkpoint every ``run.checkpoint_every_steps`` steps, and stops after the current
    step (checkpoint written, :class:`~dmlplug.engine.resume.RunInterrupted` raised) once a SIGTERM/SIGINT
    arrived on any rank. The loss terms stay on the device; they are read back (and checked for non-finite
    values) every ``run.log_every`` steps, before every checkpoint and at the end of the epoch
    (:class:`~dmlplug.engine.losslog.LossLog`).

    Raises:
        RunError: A loss term was not finite (named with its step; no checkpoint was written after it).
    """
    c, r, training = run.components, run.recipe.recipe, run.training
    training.batch_plan.set_epoch(run.epoch, skip)
    run.epoch_step, run.epoch_complete = skip, False
    generator = training.loader.generator
    run.epoch_generator_state = generator.get_state() if generator is not None else None
    freeze_backbone(c.model, run.epoch <= c.warmup_epochs)
    c.model.train()
    for module in c.trainable().values():
        if isinstance(module, torch.nn.Module):
            module.train()
    every, batches, log_every = r.run.checkpoint_every_steps, len(c.sampler), r.run.log_every
    for images, labels, indices in training.loader:
        run.step += 1
        run.epoch_step += 1
        terms = run.train_step(images, labels, indices, epoch=run.epoch, step=run.step)
        losses = run.loss_log.record(terms, epoch=run.epoch, step=run.step)
        checkpoint_due = bool(every) and run.epoch_step % every == 0 and run.epoch_step < batches
        if run.step % log_every == 0 or checkpoint_due:
            # read back now (one host sync for the window), before the hooks: loggers never get a bad value
            run.loss_log.check()
        run.host.pm.hook.on_step_end(run=run.view, step=run.step, losses=losses)
        stop = distributed.any_rank(run.stop_signal is not None)
        if stop or checkpoint_due:
            state.checkpoint(run, False)  # checks the pending losses first
        if stop:
            raise_interrupted(run)
    run.loss_log.check()  # before evaluating: a non-finite step is reported as such, not as a broken evaluation


def step_schedule(run: Any, evaluated: bool) -> None:
    """Advance the learning-rate schedule after an epoch, with the epoch's selection metric.

    The metric is signed so that larger is better (negated with ``[evaluation] mode = "min"``), and ``None``
    when the epoch was not evaluated: a schedule that follows the metric (plateau) then waits. A run that selects
    the last epoch (``select_on = "last"``, or ``auto`` without a validation split) has no selection metric: the
    schedule always gets ``None``, never the test split's metric (a schedule that declares it follows the metric
    is refused for such a run, :func:`dmlplug.engine.selection.check_metric_followers`).
    """
    metric = None
    if evaluated and run.splits.select != LAST:
        value = run.best.selection_value(run.last_metrics)
        metric = value if run.recipe.recipe.evaluation.mode == "max" else -value
    run.training.scheduler.step_epoch(metric)


def raise_interrupted(run: Any) -> None:
    """Leave the run after a SIGTERM/SIGINT, once every rank is past rank 0's checkpoint.

    Raises:
        dmlplug.engine.resume.RunInterrupted: Always.
    """
    signum = run.stop_signal or signal.SIGTERM
    distributed.barrier()
    raise _resume.RunInterrupted(
        f"interrupted by {signal.Signals(signum).name} at step {run.step} (epoch {run.epoch}); "
        "checkpoint written", signum=signum, where=str(run.directory),
        fix=f"continue with: dmlplug run {run.directory} --resume")
