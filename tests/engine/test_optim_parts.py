"""Parameter groups declared as parts of one group (``"parent"``): what ``[optimizer.groups.<parent>]`` does to them.

The built-in that declares parts, the timm backbone's ``layer_decay``, is tested in
tests/builtins/backbones/test_vit.py.
"""

import pytest
import torch

from dmlplug.engine.optim import collect_groups, param_groups
from dmlplug.errors import RecipeError
from dmlplug.recipe.schema import OptimizerOptions


class TwoLayers(torch.nn.Module):
    """A component whose two layers are parts of its group "backbone", the lower one at half the rate."""

    def __init__(self):
        super().__init__()
        self.low, self.high = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)

    def optimizer_param_groups(self):
        return [{"name": "backbone.low", "params": list(self.low.parameters()), "lr_mult": 0.5, "parent": "backbone"},
                {"name": "backbone.high", "params": list(self.high.parameters()), "lr_mult": 1.0,
                 "parent": "backbone"}]


def _lrs(groups_options, lr=0.1):
    groups = collect_groups([("backbone", TwoLayers()), ("head", torch.nn.Linear(2, 2))])
    options = OptimizerOptions.model_validate({"lr": lr, "weight_decay": 0.01, "groups": groups_options})
    return {g["name"]: (g["lr"], g["weight_decay"]) for g in param_groups(groups, options)}


def test_parts_take_the_optimizers_rate_times_their_multiplier():
    assert _lrs({}) == {"backbone.low": (pytest.approx(0.05), 0.01), "backbone.high": (0.1, 0.01), "head": (0.1, 0.01)}


def test_an_override_of_the_parent_sets_the_wholes_rate_and_each_part_keeps_its_multiplier():
    lrs = _lrs({"backbone": {"lr": 1e-3, "weight_decay": 0.0}, "head": {"lr": 1.0}})
    assert lrs == {"backbone.low": (pytest.approx(5e-4), 0.0), "backbone.high": (pytest.approx(1e-3), 0.0),
                   "head": (1.0, 0.01)}
    lrs = _lrs({"backbone": {"lr_mult": 3.0}})
    assert lrs["backbone.low"][0] == pytest.approx(0.15) and lrs["backbone.high"][0] == pytest.approx(0.3)


def test_only_the_parent_is_addressed_by_name():
    with pytest.raises(RecipeError, match=r"optimizer.groups.backbone.low: no parameter group of that name") as info:
        _lrs({"backbone.low": {"lr": 1.0}})
    assert info.value.fix == "groups of this recipe: backbone, head"
