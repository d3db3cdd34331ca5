"""``register_tune_samplers`` and ``register_tune_pruners``: a third-party plugin's Optuna sampler and pruner, named
in a space file's ``[tune]``, choose and stop the trials of the search loop ``dmlplug tune run`` runs
(:func:`dmlplug_builtins.tune.tune.tune`, looking the names up in the host given to it).

The fold runs are stand-ins (no training): the runner reports one validation score to the trial's hook, as a real
run's ``on_eval_end`` does, so the pruner is asked exactly as in a search.
"""

from __future__ import annotations

from typing import Literal

import optuna
import pytest
import throwaway
from e2e import TINY_RECIPE
from pydantic import Field

import dmlplug
from dmlplug import Params
from dmlplug.errors import RecipeError
from dmlplug.plugins import get_host
from dmlplug.protocols import TunePruner, TuneSampler
from dmlplug_builtins.tune.tune import tune

State = optuna.trial.TrialState
#: The searched keys: a float range, a categorical and an int range.
SPACE = """
recipe = "recipe.toml"
[tune]
metric = "recall@1"
folds = 2
sampler_seed = 7
sampler = {sampler}
pruner = {pruner}
[params."optimizer.lr"]
type = "float"
low = 1e-4
high = 1e-2
log = true
[params."loss.alpha"]
type = "categorical"
choices = [2.0, 1.0, 0.5]
[params."data.sampler.m"]
type = "int"
low = 2
high = 4
step = 2
"""
FIRST = {"optimizer.lr": 1e-4, "loss.alpha": 2.0, "data.sampler.m": 2}

# ------------------------------------------------------------------------------------------------- plugins


class EndParams(Params):
    """Parameters of the throwaway sampler."""

    end: Literal["first", "last"] = Field("first", description="Every key's first choice (its range's low end), "
                                                                "or its last (the high end).")


class EndSampler(optuna.samplers.BaseSampler):
    """Every key at one end of its distribution: nothing random, so the test knows every trial's values."""

    def __init__(self, end: str):
        self.end = end

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution):
        first = self.end == "first"
        if isinstance(param_distribution, optuna.distributions.CategoricalDistribution):
            return param_distribution.choices[0 if first else -1]
        return param_distribution.low if first else param_distribution.high


class SamplerPlugin(throwaway.RegisteringPlugin):
    """``register_tune_samplers``."""

    kind, hook, name, params = "tune_samplers", "register_tune_samplers", "hooks_end", EndParams

    @dmlplug.hookimpl
    def register_tune_samplers(self, register):
        self._register(register)

    def make(self, params, ctx):
        return EndSampler(params.end)


class PruneAll(optuna.pruners.BasePruner):
    """Prunes every trial at its first report."""

    def prune(self, study, trial):
        return True


class PrunerPlugin(throwaway.RegisteringPlugin):
    """``register_tune_pruners``."""

    kind, hook, name = "tune_pruners", "register_tune_pruners", "hooks_prune_all"

    @dmlplug.hookimpl
    def register_tune_pruners(self, register):
        self._register(register)

    def make(self, params, ctx):
        return PruneAll()


@pytest.fixture(scope="module")
def plugins():
    return {cls.kind: cls() for cls in (SamplerPlugin, PrunerPlugin)}


@pytest.fixture(scope="module")
def tune_host(plugins):
    return throwaway.fresh_host(*((plugin, plugin.name) for plugin in plugins.values()))


def write_space(folder, sampler, pruner):
    (folder / "recipe.toml").write_text(TINY_RECIPE)
    path = folder / "s.space.toml"
    path.write_text(SPACE.format(sampler=sampler, pruner=pruner))
    return path


class Result:
    """What a fold run returns, as far as a trial reads it."""

    def __init__(self, value):
        self.selection_metrics = {"recall@1": value}


def check_registered(host, plugin, protocol):
    assert plugin.registers and all(callable(r) for r in plugin.registers), f"{plugin.hook} was not called"
    info = host.registry.get(plugin.kind, plugin.name)
    assert host.registry.get(plugin.kind, plugin.alias) is info
    assert (info.name, info.plugin, info.description) == (plugin.name, plugin.name, plugin.description)
    assert plugin.params is None or info.params is plugin.params
    assert host.records[plugin.name].hooks == [plugin.hook]
    built = info.build(info.validate({}, where="tune"), dmlplug.BuildContext(search_space={}))
    assert isinstance(built, protocol)


# --------------------------------------------------------------------------------------------------- tests


@pytest.mark.hook("register_tune_samplers")
def test_a_registered_sampler_chooses_every_trial(tune_host, plugins, tmp_path):
    plugin = plugins["tune_samplers"]
    check_registered(tune_host, plugin, TuneSampler)
    space = write_space(tmp_path, '"hooks_end"', '"none"')  # a name alone: its parameters' defaults
    calls = []

    def runner(recipe, overrides, **options):
        calls.append(overrides)
        return Result(0.5)

    study = tune(space, tmp_path / "t", trials=3, registry=tune_host.registry, runner=runner, echo=lambda _: None)
    assert [t.state for t in study.trials] == [State.COMPLETE] * 3
    assert [t.params for t in study.trials] == [FIRST] * 3  # every key's first choice, every trial
    assert all({"optimizer.lr=0.0001", "loss.alpha=2.0", "data.sampler.m=2"} <= set(o) for o in calls)
    params, ctx, _ = plugin.built[-1]
    assert params.end == "first" and ctx.seed == 7  # [tune] sampler_seed
    assert ctx.search_space == {  # the searched keys as Optuna distributions
        "optimizer.lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True),
        "loss.alpha": optuna.distributions.CategoricalDistribution([2.0, 1.0, 0.5]),
        "data.sampler.m": optuna.distributions.IntDistribution(2, 4, step=2)}
    # As a table, with its parameters.
    space = write_space(tmp_path, '{name = "hooks_end_alias", end = "last"}', '"none"')
    study = tune(space, tmp_path / "last", trials=1, registry=tune_host.registry, runner=runner, echo=lambda _: None)
    assert study.trials[0].params == {"optimizer.lr": 1e-2, "loss.alpha": 0.5, "data.sampler.m": 4}


@pytest.mark.hook("register_tune_samplers")
@pytest.mark.hook("register_tune_pruners")
def test_the_names_are_looked_up_in_the_registry_given(tune_host, tmp_path):
    for sampler, pruner, needle in (('"hooks_ends"', '"none"', "unknown tune_sampler 'hooks_ends' (did you mean "
                                                               "'hooks_end'"),
                                    ('"random"', '"hooks_prune_al"', "dmlplug list tune_pruners"),
                                    ('{name = "hooks_end", end = "middle"}', '"none"', "sampler.end")):
        with pytest.raises(RecipeError) as info:
            tune(write_space(tmp_path, sampler, pruner), tmp_path / "t", trials=1, registry=tune_host.registry)
        assert needle in str(info.value), info.value
    # The process-wide host has no such plugin: the names resolve in the host the command works with only.
    with pytest.raises(RecipeError, match="dmlplug list tune_samplers"):
        tune(write_space(tmp_path, '"hooks_end"', '"none"'), tmp_path / "t", trials=1,
             registry=get_host().registry)
    assert not (tmp_path / "t").exists()  # refused before anything is written


@pytest.mark.hook("register_tune_pruners")
def test_a_registered_pruner_stops_every_trial(tune_host, plugins, tmp_path):
    plugin = plugins["tune_pruners"]
    check_registered(tune_host, plugin, TunePruner)
    space = write_space(tmp_path, '"random"', '"hooks_prune_all"')
    folds = []

    def runner(recipe, overrides, *, hooks, out, **options):
        folds.append(out.name)
        hooks[0].on_eval_end(None, 1, "val", {"recall@1": 0.5})  # raises TrialPruned, as in a real run
        return Result(0.5)

    study = tune(space, tmp_path / "t", trials=3, registry=tune_host.registry, runner=runner, echo=lambda _: None)
    assert [t.state for t in study.trials] == [State.PRUNED] * 3
    assert [t.intermediate_values for t in study.trials] == [{1: 0.5}] * 3  # pruned at the first report
    assert folds == ["fold-0"] * 3  # no trial reached its second fold
