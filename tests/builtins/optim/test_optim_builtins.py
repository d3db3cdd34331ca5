"""The built-in optimizers and learning-rate schedules (plugins/optim): known answers.

The schedules' learning rates are compared with the formulas computed by hand; the schedule objects satisfy
:class:`dmlplug.protocols.LRSchedule` and checkpoint the wrapped torch scheduler's own state.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

import dmlplug
from dmlplug.errors import RecipeError
from dmlplug.protocols import LRSchedule, Optimizer


def _groups(*lrs):
    return [{"name": f"g{i}", "params": [torch.nn.Parameter(torch.zeros(1))], "lr": lr, "weight_decay": 0.0}
            for i, lr in enumerate(lrs)]


def _optimizer(*lrs):
    return dmlplug.create("optimizer", "sgd", param_groups=_groups(*lrs), momentum=0.0)


def _lrs(schedule, optimizer, epochs, metrics=None):
    """The lr of every group at the start of each epoch, stepping once per epoch as the engine does."""
    out = []
    for epoch in range(epochs):
        out.append([g["lr"] for g in optimizer.param_groups])
        optimizer.step()
        schedule.step_epoch(None if metrics is None else metrics[epoch])
    return out


# ------------------------------------------------------------------------------------------------ optimizers


@pytest.mark.parametrize(("name", "cls"), [("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW)])
def test_adam_and_adamw_get_the_recipes_betas_and_the_engines_groups(name, cls):
    groups = _groups(0.1, 0.01)
    opt = dmlplug.create("optimizer", name, param_groups=groups, betas=[0.5, 0.75])
    assert type(opt) is cls and isinstance(opt, Optimizer)
    assert [(g["name"], g["lr"], g["betas"]) for g in opt.param_groups] == [("g0", 0.1, (0.5, 0.75)),
                                                                              ("g1", 0.01, (0.5, 0.75))]
    assert opt.param_groups[0]["params"][0] is groups[0]["params"][0]


def test_sgd_gets_momentum_and_nesterov():
    opt = dmlplug.create("optimizer", "sgd", param_groups=_groups(0.1), momentum=0.7, nesterov=True)
    assert type(opt) is torch.optim.SGD
    assert opt.param_groups[0]["momentum"] == 0.7 and opt.param_groups[0]["nesterov"] is True
    assert dmlplug.create("optimizer", "sgd", param_groups=_groups(0.1)).param_groups[0]["momentum"] == 0.9


@pytest.mark.parametrize(("name", "params", "message"), [
    ("sgd", {"nesterov": True, "momentum": 0.0}, "nesterov = true needs momentum > 0"),
    ("adam", {"betas": [0.9, 1.0]}, r"each beta must be in \[0, 1\)"),
    ("adam", {"momentum": 0.9}, "unknown key"),
    ("sgd", {"betas": [0.9, 0.99]}, "unknown key"),
])
def test_optimizer_parameters_are_checked_at_validation(name, params, message):
    with pytest.raises(RecipeError, match=message):
        dmlplug.create("optimizer", name, param_groups=_groups(0.1), **params)


# ------------------------------------------------------------------------------------------------ schedules


def test_none_keeps_the_learning_rates():
    opt = _optimizer(1.0, 0.5)
    schedule = dmlplug.create("lr_schedule", "none", optimizer=opt, epochs=3)
    assert isinstance(schedule, LRSchedule)
    assert _lrs(schedule, opt, 3, metrics=[None, 1.0, 2.0]) == [[1.0, 0.5]] * 3
    assert schedule.state_dict() == {}


@pytest.mark.parametrize(("name", "params", "expected"), [
    ("step", {"step_size": 2, "gamma": 0.5}, [1.0, 1.0, 0.5, 0.5, 0.25]),
    ("multistep", {"milestones": [1, 3], "gamma": 0.1}, [1.0, 0.1, 0.1, 0.01, 0.01]),
])
def test_step_schedules_decay_at_their_epochs(name, params, expected):
    opt = _optimizer(1.0)
    schedule = dmlplug.create("lr_schedule", name, optimizer=opt, epochs=5, **params)
    assert isinstance(schedule, LRSchedule)
    assert [lrs[0] for lrs in _lrs(schedule, opt, 5)] == pytest.approx(expected)


def test_cosine_warms_up_then_decays_to_min_lr_by_hand():
    # base lrs 1.0 and 0.1, 5 epochs, 1 warm-up epoch, min_lr 0.1:
    #   epoch 0: warm-up (0 + 1) / (1 + 1) = 0.5 of each base
    #   epoch e >= 1: p = (e - 1) / 4; factor = f + (1 - f) * (1 + cos(pi p)) / 2 with f = min_lr / base
    opt = _optimizer(1.0, 0.1)
    schedule = dmlplug.create("lr_schedule", "cosine", optimizer=opt, epochs=5, warmup_epochs=1, min_lr=0.1)
    lrs = _lrs(schedule, opt, 6)
    first = [0.5, 1.0, 0.1 + 0.9 * (1 + math.cos(math.pi / 4)) / 2, 0.1 + 0.9 * 0.5,
             0.1 + 0.9 * (1 + math.cos(3 * math.pi / 4)) / 2, 0.1]  # epoch 5: progress clipped at 1
    assert [lr[0] for lr in lrs] == pytest.approx(first)
    assert [round(v, 6) for v in first[2:5]] == [0.868198, 0.55, 0.231802]
    # the second group's base equals min_lr: warm-up, then constant
    assert [lr[1] for lr in lrs] == pytest.approx([0.05, 0.1, 0.1, 0.1, 0.1, 0.1])


def test_cosine_without_warm_up_decays_from_the_base_to_zero():
    opt = _optimizer(2.0)
    schedule = dmlplug.create("lr_schedule", "cosine", optimizer=opt, epochs=4)
    assert [lr[0] for lr in _lrs(schedule, opt, 4)] == pytest.approx(
        [2.0, 2.0 * (1 + math.cos(math.pi / 4)) / 2, 1.0, 2.0 * (1 + math.cos(3 * math.pi / 4)) / 2])


def test_plateau_decays_after_patience_evaluations_without_improvement():
    opt = _optimizer(1.0)
    schedule = dmlplug.create("lr_schedule", "plateau", optimizer=opt, epochs=10, patience=2, gamma=0.5, min_lr=0.2)
    # metric (larger is better): improves, then stalls; None = an epoch without evaluation, which does not count
    metrics = [0.5, 0.6, 0.6, None, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]
    lrs = [lr[0] for lr in _lrs(schedule, opt, 10, metrics)]
    # 3 evaluations without improvement (> patience = 2) after the best 0.6 at epoch 1: decay after epoch 5
    assert lrs == pytest.approx([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25])
    more = _lrs(schedule, opt, 6, [0.6] * 6)
    assert more[-1][0] == pytest.approx(0.2)  # never below min_lr


def test_the_engine_signs_the_metric_so_that_larger_is_better():
    from dmlplug.engine.loop import step_schedule

    seen = []
    for mode, evaluated, select in (("max", True, "val"), ("min", True, "val"), ("min", False, "val"),
                                    ("max", True, "last")):
        run = SimpleNamespace(
            recipe=SimpleNamespace(recipe=SimpleNamespace(evaluation=SimpleNamespace(mode=mode))),
            best=SimpleNamespace(selection_value=lambda metrics: metrics["loss"]), last_metrics={"loss": 0.25},
            splits=SimpleNamespace(select=select),
            training=SimpleNamespace(scheduler=SimpleNamespace(step_epoch=seen.append)))
        step_schedule(run, evaluated)
    # A run that selects the last epoch has no selection metric: its (test) evaluation is never handed over.
    assert seen == [0.25, -0.25, None, None]


def test_plateau_with_mode_min_decays_when_the_metric_stops_falling():
    # what the engine hands a plateau schedule with [evaluation] mode = "min": the negated metric
    opt = _optimizer(1.0)
    schedule = dmlplug.create("lr_schedule", "plateau", optimizer=opt, epochs=6, patience=1, gamma=0.1)
    losses = [3.0, 2.0, 1.0, 1.0, 1.0, 1.0]
    lrs = [lr[0] for lr in _lrs(schedule, opt, 6, [-v for v in losses])]
    assert lrs == pytest.approx([1.0, 1.0, 1.0, 1.0, 1.0, 0.1])


@pytest.mark.parametrize(("name", "params"), [("step", {"step_size": 1}), ("cosine", {"warmup_epochs": 2}),
                                              ("plateau", {"patience": 0}), ("multistep", {"milestones": [2]})])
def test_a_restored_schedule_continues_where_it_was_saved(name, params):
    opt = _optimizer(1.0)
    schedule = dmlplug.create("lr_schedule", name, optimizer=opt, epochs=6, **params)
    _lrs(schedule, opt, 3, [0.1, 0.2, 0.1])
    state, opt_state = schedule.state_dict(), opt.state_dict()
    expected = _lrs(schedule, opt, 3, [0.1, 0.1, 0.1])

    again = _optimizer(1.0)
    restored = dmlplug.create("lr_schedule", name, optimizer=again, epochs=6, **params)
    again.load_state_dict(opt_state)
    restored.load_state_dict(state)
    assert [lrs[0] for lrs in _lrs(restored, again, 3, [0.1, 0.1, 0.1])] == pytest.approx([e[0] for e in expected])


def test_a_schedule_checkpoints_the_torch_schedulers_own_state():
    opt = _optimizer(1.0)
    schedule = dmlplug.create("lr_schedule", "cosine", optimizer=opt, epochs=4)
    torch_state = schedule.scheduler.state_dict()
    assert schedule.state_dict() == torch_state and torch_state["lr_lambdas"] == [None]
