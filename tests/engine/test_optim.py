"""Optimizer parameter groups (overrides, component defaults) and learning-rate schedules of dmlplug.engine.optim.

They test the engine, not a built-in plugin: they came from the former tests/builtins/test_backbones_heads_optim.py
and belong in tests/engine/.
"""

import pytest
import torch

from dmlplug.errors import RecipeError


def test_optimizer_groups_overrides_and_component_defaults():
    from dmlplug.engine.optim import build_optimizer, collect_groups
    from dmlplug.recipe import OptimizerSection

    class WithGroups(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.flow = torch.nn.Linear(2, 2)

        def optimizer_param_groups(self):
            return [{"name": "flow", "params": list(self.flow.parameters()), "lr_mult": 50.0, "weight_decay": 0.0}]

    backbone_mod, head, loss = torch.nn.Linear(3, 3), torch.nn.Linear(3, 2), torch.nn.Linear(1, 1)
    shared = torch.nn.Module()
    shared.again = head  # a parameter reachable twice stays in its first group
    groups = collect_groups([("backbone", backbone_mod), ("head", head), ("loss", loss), ("reg", WithGroups()),
                             ("shared", shared)])
    assert [g.name for g in groups] == ["backbone", "head", "loss", "flow"]
    section = OptimizerSection.model_validate(
        {"name": "sgd", "lr": 0.1, "weight_decay": 1e-4, "groups": {"loss": {"lr": 0.5}, "head": {"lr_mult": 2}}})
    opt = build_optimizer(groups, section)
    by_name = {g["name"]: g for g in opt.param_groups}
    assert by_name["backbone"]["lr"] == 0.1 and by_name["backbone"]["weight_decay"] == 1e-4
    assert by_name["head"]["lr"] == pytest.approx(0.2)
    assert by_name["loss"]["lr"] == 0.5
    assert by_name["flow"]["lr"] == pytest.approx(5.0) and by_name["flow"]["weight_decay"] == 0.0
    with pytest.raises(RecipeError, match="no parameter group of that name"):
        build_optimizer(groups, OptimizerSection.model_validate({"groups": {"los": {"lr": 1}}}))
    with pytest.raises(Exception, match="either lr or lr_mult"):
        OptimizerSection.model_validate({"groups": {"loss": {"lr": 1, "lr_mult": 2}}})


@pytest.mark.parametrize(
    ("sched", "expected"),
    [
        ({"name": "step", "step_size": 2, "gamma": 0.5}, [1.0, 1.0, 0.5, 0.5, 0.25]),
        ({"name": "multistep", "milestones": [1, 3], "gamma": 0.1}, [1.0, 0.1, 0.1, 0.01, 0.01]),
        ({"name": "cosine", "warmup_epochs": 1}, None),
    ],
)
def test_schedules(sched, expected):
    from dmlplug.engine.optim import build_scheduler
    from dmlplug.recipe import SchedulerSection

    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=1.0)
    scheduler = build_scheduler(opt, SchedulerSection.model_validate(sched), epochs=5)
    lrs = []
    for _ in range(5):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    if expected is not None:
        assert lrs == pytest.approx(expected)
    else:  # warm-up from half the lr, then a cosine decay towards 0
        assert lrs[0] == pytest.approx(0.5) and lrs[1] == pytest.approx(1.0)
        assert lrs[1] > lrs[2] > lrs[3] > lrs[4] > 0
