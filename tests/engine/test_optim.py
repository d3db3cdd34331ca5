"""Optimizer parameter groups of dmlplug.engine.optim: component defaults, recipe overrides, the groups handed to
the registered optimizer (``ctx.param_groups``), and the engine building the recipe's optimizer and schedule.

The built-in optimizers and schedules themselves are tested in tests/builtins/optim/.
"""

import pytest
import torch

from dmlplug.errors import RecipeError


class WithGroups(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.flow = torch.nn.Linear(2, 2)

    def optimizer_param_groups(self):
        return [{"name": "flow", "params": list(self.flow.parameters()), "lr_mult": 50.0, "weight_decay": 0.0}]


def _groups():
    from dmlplug.engine.optim import collect_groups

    backbone_mod, head, loss = torch.nn.Linear(3, 3), torch.nn.Linear(3, 2), torch.nn.Linear(1, 1)
    shared = torch.nn.Module()
    shared.again = head  # a parameter reachable twice stays in its first group
    return collect_groups([("backbone", backbone_mod), ("head", head), ("loss", loss), ("reg", WithGroups()),
                           ("shared", shared)])


def test_optimizer_groups_overrides_and_component_defaults():
    import dmlplug
    from dmlplug.engine.optim import param_groups
    from dmlplug.recipe.schema import OptimizerOptions

    groups = _groups()
    assert [g.name for g in groups] == ["backbone", "head", "loss", "flow"]
    options = OptimizerOptions.model_validate(
        {"lr": 0.1, "weight_decay": 1e-4, "groups": {"loss": {"lr": 0.5}, "head": {"lr_mult": 2}}})
    torch_groups = param_groups(groups, options)
    assert [g["name"] for g in torch_groups] == ["backbone", "head", "loss", "flow"]
    # the registered optimizer trains exactly these groups, with these rates
    opt = dmlplug.create("optimizer", "sgd", param_groups=torch_groups)
    by_name = {g["name"]: g for g in opt.param_groups}
    assert by_name["backbone"]["lr"] == 0.1 and by_name["backbone"]["weight_decay"] == 1e-4
    assert by_name["head"]["lr"] == pytest.approx(0.2)
    assert by_name["loss"]["lr"] == 0.5
    assert by_name["flow"]["lr"] == pytest.approx(5.0) and by_name["flow"]["weight_decay"] == 0.0
    with pytest.raises(RecipeError, match="no parameter group of that name.*did you mean 'loss'"):
        param_groups(groups, OptimizerOptions.model_validate({"groups": {"los": {"lr": 1}}}))
    with pytest.raises(Exception, match="either lr or lr_mult"):
        OptimizerOptions.model_validate({"groups": {"loss": {"lr": 1, "lr_mult": 2}}})


def test_an_optimizer_built_outside_a_run_says_it_needs_param_groups():
    import dmlplug
    from dmlplug.errors import ComponentError

    with pytest.raises(ComponentError, match="optimizer 'adam' .* needs param_groups"):
        dmlplug.create("optimizer", "adam")
    with pytest.raises(ComponentError, match="lr_schedule 'cosine' .* needs optimizer"):
        dmlplug.create("lr_schedule", "cosine", epochs=3)


def test_the_engine_builds_the_recipes_optimizer_and_schedule_over_its_groups(tmp_path):
    """[optimizer] lr / weight_decay / groups shape the groups; the rest of the table reaches the optimizer."""
    from dmlplug.engine.assembly import build_optimizer
    from dmlplug.engine.build import Components, new_context
    from dmlplug.engine.model import EmbeddingModel
    from dmlplug.plugins import PluginHost
    from dmlplug.recipe import load_recipe

    host = PluginHost().load(entry_points=False)
    raw = {"data": {"dataset": {"name": "glyphs"}}, "backbone": {"name": "timm"}, "loss": {"name": "triplet"},
           "run": {"epochs": 4},
           "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.5, "nesterov": True, "groups": {"head": {"lr": 1.0}}},
           "scheduler": {"name": "step", "step_size": 1, "gamma": 0.5}}
    recipe = load_recipe(raw, registry=host.registry)
    model = EmbeddingModel(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    components = Components(
        dataset=None, sampler=None, model=model, loss=torch.nn.Identity(), loss_weight=1.0, miner=None,
        regularizers=[], evaluators=[], loggers=[], warmup_epochs=0,
        optimizer_spec=recipe.components["optimizer"], schedule_spec=recipe.components["scheduler"],
        context=new_context(recipe, device="cpu", host=host))
    optimizer, schedule = build_optimizer(components, epochs=4)
    assert isinstance(optimizer, torch.optim.SGD)
    assert {g["name"]: g["lr"] for g in optimizer.param_groups} == {"backbone": 0.1, "head": 1.0}
    assert all(g["momentum"] == 0.5 and g["nesterov"] for g in optimizer.param_groups)
    optimizer.step()
    schedule.step_epoch(None)
    assert {g["name"]: g["lr"] for g in optimizer.param_groups} == {"backbone": 0.05, "head": 0.5}
