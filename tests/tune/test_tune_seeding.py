"""A seeded search samples trial ``n``'s values from a seed of its own: a restarted command (or a second worker
opening the study with the same seed) continues the draws an uninterrupted search makes, never repeats them."""

import pytest
from tiny import registry, scoring_runner, write_tiny

from dmlplug_builtins.tune.tune import tune


def params(study):
    return [t.params for t in sorted(study.trials, key=lambda t: t.number)]


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_search_resumed_one_trial_at_a_time_samples_what_an_uninterrupted_one_does(tmp_path, sampler):
    space = write_tiny(tmp_path)
    space.write_text(space.read_text().replace('sampler = "random"', f'sampler = "{sampler}"'))
    quiet = {"runner": scoring_runner, "echo": lambda _: None}
    whole = params(tune(space, tmp_path / "whole", trials=13, registry=registry(), **quiet))
    for count in range(1, 14):  # thirteen commands, each opening the study afresh with the same seed
        resumed = tune(space, tmp_path / "resumed", trials=count, registry=registry(), **quiet)
    assert params(resumed) == whole
    learning_rates = [p["optimizer.lr"] for p in whole]
    assert len(set(learning_rates)) == len(learning_rates)  # no trial repeats another's draw


def test_another_seed_draws_other_values(tmp_path):
    space = write_tiny(tmp_path)
    quiet = {"runner": scoring_runner, "echo": lambda _: None}
    first = params(tune(space, tmp_path / "a", trials=3, registry=registry(), **quiet))
    space.write_text(space.read_text().replace("sampler_seed = 0", "sampler_seed = 1"))
    assert params(tune(space, tmp_path / "b", trials=3, registry=registry(), **quiet)) != first


def test_tpe_startup_trials_sets_where_the_model_takes_over(tmp_path):
    # TPE's start-up trials are its random sampler's draws with the same seed: the first `startup_trials`
    # trials equal a random search's, the next one is TPE's own (with the default of 10, still random).
    space = write_tiny(tmp_path)
    quiet = {"runner": scoring_runner, "echo": lambda _: None}
    random = params(tune(space, tmp_path / "random", trials=4, registry=registry(), **quiet))
    text = space.read_text().replace('sampler = "random"', 'sampler = "tpe"')
    space.write_text(text)
    default = params(tune(space, tmp_path / "default", trials=4, registry=registry(), **quiet))
    space.write_text(text.replace('sampler = "tpe"', 'sampler = {name = "tpe", startup_trials = 3}'))
    modelled = params(tune(space, tmp_path / "modelled", trials=4, registry=registry(), **quiet))
    assert default == random
    assert modelled[:3] == random[:3] and modelled[3] != random[3]
