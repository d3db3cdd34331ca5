"""Contract checks of ``dmlplug tune``'s samplers and pruners."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dmlplug.testing.fixtures import build, expect, load_host, make_context

if TYPE_CHECKING:
    from dmlplug.plugins import PluginHost


def _space() -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    return {"optimizer.lr": FloatDistribution(1e-4, 1e-2, log=True), "loss.margin": FloatDistribution(0.1, 0.5),
            "data.sampler.m": IntDistribution(2, 8, step=2),
            "loss.name": CategoricalDistribution(["arcface", "margin"])}


def check_tune_sampler(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """A sampler drives an Optuna study: every value inside its distribution, the same trials under a seed.

    Six trials, or as many as a grid of the choices has points.

    It is built as ``dmlplug tune`` builds it: ``ctx.seed`` set and ``ctx.search_space`` the searched keys (ranges
    and choices). A sampler that cannot search ranges (a grid) must refuse them with a clear ``DmlplugError``
    when it is built; it is then checked on the choices alone.
    """
    import optuna

    from dmlplug.errors import DmlplugError

    host = host or load_host()
    space = _space()
    try:
        build("tune_samplers", name, make_context(host, seed=7, search_space=space), **(params or {}))
    except DmlplugError:
        space = {key: dist for key, dist in space.items()
                 if isinstance(dist, optuna.distributions.CategoricalDistribution)}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    trials = 6
    if all(isinstance(d, optuna.distributions.CategoricalDistribution) for d in space.values()):
        import math

        trials = min(trials, math.prod(len(d.choices) for d in space.values()))  # a grid has no more points
    runs = []
    for _ in range(2):
        sampler = build("tune_samplers", name, make_context(host, seed=7, search_space=space), **(params or {}))
        study = optuna.create_study(sampler=sampler, direction="maximize")
        values = []
        for _ in range(trials):
            trial = study.ask()
            chosen = {key: _suggest(trial, key, dist) for key, dist in space.items()}
            for key, value in chosen.items():
                expect(space[key]._contains(space[key].to_internal_repr(value)),
                       f"tune sampler {name!r}: {key} = {value!r} is outside {space[key]}")
            study.tell(trial, float(trial.number % 3))  # a value to learn from, the same on both runs
            values.append(chosen)
        runs.append(values)
    expect(runs[0] == runs[1], f"tune sampler {name!r}: not reproducible under the same seed")


def _suggest(trial: Any, key: str, dist: Any) -> Any:
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(key, dist.choices)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(key, dist.low, dist.high, step=dist.step, log=dist.log)
    return trial.suggest_float(key, dist.low, dist.high, step=dist.step, log=dist.log)


def check_tune_pruner(name: str, *, host: PluginHost | None = None, params: dict[str, Any] | None = None) -> None:
    """A pruner answers a bool for trials reporting the running mean, and never prunes before the first report."""
    import optuna

    host = host or load_host()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = build("tune_pruners", name, make_context(host), **(params or {}))
    study = optuna.create_study(pruner=pruner, direction="maximize")
    for number in range(4):
        trial = study.ask()
        expect(trial.should_prune() is False, f"tune pruner {name!r}: prunes trial {number} before any report")
        for step in range(1, 6):
            trial.report(0.1 * number + 0.01 * step, step)
            answer = trial.should_prune()
            expect(isinstance(answer, bool), f"tune pruner {name!r}: should_prune gave {answer!r}, not a bool")
            if answer:
                break
        study.tell(trial, state=optuna.trial.TrialState.PRUNED) if answer else study.tell(trial, 0.1 * number)
