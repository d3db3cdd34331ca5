"""`dmlplug tune report` writes TensorBoard's HParams data: read back with TensorBoard's own readers (the event
accumulator, the hparams plugin's metadata parsers and its session-group listing, as the dashboard asks for it)
and checked against the study's trials: domains, sampled values, objective, fold scores, state, running mean."""

import optuna
import pytest
from optuna.trial import TrialState
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2, metadata
from tiny import registry, write_tiny

from dmlplug_builtins.tune.hparams import STATE_CODES
from dmlplug_builtins.tune.report import write_report
from dmlplug_builtins.tune.tune import tune

SPACE_EXTRA = """
[params."data.sampler.batches_per_epoch"]
type = "int"
low = 1
high = 3
[params."data.sampler.m"]
type = "categorical"
choices = [2, 4]
"""


class Result:
    def __init__(self, value):
        self.selection_metrics = {"map@r": value}


def scripted_search(tmp_path):
    """Four trials through the real tune loop and fold reporter: complete, pruned at its first step, failed,
    complete; the runner reports scripted per-epoch scores to the trial's hook instead of training."""
    space = write_tiny(tmp_path)
    text = space.read_text().replace('pruner = "none"', 'pruner = {name = "median", startup_trials = 1}') + SPACE_EXTRA
    space.write_text(text)
    scores = iter([0.5, 0.7,   # trial 0: folds 0.5, 0.7
                   0.1,        # trial 1: fold 0 reports 0.1 at step 1, below trial 0's 0.5: pruned
                   None,       # trial 2: fails
                   0.6, 0.8])  # trial 3: folds 0.6, 0.8

    def runner(recipe, overrides, *, hooks, **options):
        value = next(scores)
        if value is None:
            raise RuntimeError("CUDA out of memory")
        hooks[0].on_eval_end(None, 1, "val", {"map@r": value})  # may raise TrialPruned, as in a real run
        return Result(value)

    return tune(space, tmp_path / "t", trials=4, registry=registry(), runner=runner, echo=lambda _: None)


def plugin_content(accumulator, tag):
    return accumulator.PluginTagToContent("hparams")[tag]


def test_report_writes_the_hparams_experiment_and_a_session_per_trial(tmp_path):
    study = scripted_search(tmp_path)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL,
                                               TrialState.COMPLETE]
    write_report([str(tmp_path / "t")])
    board = tmp_path / "t" / "report" / "tensorboard"
    root = EventAccumulator(str(board))
    root.Reload()
    experiment = metadata.parse_experiment_plugin_data(plugin_content(root, metadata.EXPERIMENT_TAG))
    infos = {h.name: h for h in experiment.hparam_infos}
    assert sorted(infos) == ["data.sampler.batches_per_epoch", "data.sampler.m", "loss.alpha", "optimizer.lr"]
    lr, alpha, batches, m = (infos[k] for k in ("optimizer.lr", "loss.alpha", "data.sampler.batches_per_epoch",
                                                "data.sampler.m"))
    assert (lr.domain_interval.min_value, lr.domain_interval.max_value) == pytest.approx((1e-4, 1e-2))
    assert (alpha.domain_interval.min_value, alpha.domain_interval.max_value) == (0.5, 4.0)
    assert (batches.domain_interval.min_value, batches.domain_interval.max_value) == (1, 3)
    assert [v.number_value for v in m.domain_discrete.values] == [2, 4] and m.type == api_pb2.DATA_TYPE_FLOAT64
    assert [mi.name.tag for mi in experiment.metric_infos] == ["objective", "fold_0", "fold_1", "state",
                                                               "running_mean"]
    for trial in study.trials:
        session = board / f"trial-{trial.number:04d}"
        assert len(list(session.glob("events.out.tfevents.*"))) == 1
        acc = EventAccumulator(str(session))
        acc.Reload()
        start = metadata.parse_session_start_info_plugin_data(plugin_content(acc, metadata.SESSION_START_INFO_TAG))
        assert start.group_name and start.start_time_secs == pytest.approx(trial.datetime_start.timestamp())
        sampled = {k: (v.number_value if v.WhichOneof("kind") == "number_value" else v.string_value)
                   for k, v in start.hparams.items()}
        assert sampled == pytest.approx(trial.params)
        scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
        assert scalars["state"] == [(0, STATE_CODES[trial.state.name])]
        running = dict(scalars.get("running_mean", []))
        assert running == pytest.approx(trial.intermediate_values)
        if trial.state == TrialState.COMPLETE:
            assert scalars["objective"] == [(0, pytest.approx(trial.value))]
        else:
            assert "objective" not in scalars
        folds = {k: v for k, v in trial.user_attrs.items() if k.startswith("fold_")}
        assert {k: scalars[k][0][1] for k in scalars if k.startswith("fold_")} == pytest.approx(folds)
    # The pruned trial's only report: the running mean 0.1 at step 1 (fold 0, epoch 1); the complete ones' too.
    assert study.trials[1].intermediate_values == {1: pytest.approx(0.1)}
    assert study.trials[3].intermediate_values == pytest.approx({1: 0.6, 2: 0.7})
    # A second report replaces the folder: still one event file per session.
    write_report([str(tmp_path / "t")])
    assert len(list((board / "trial-0000").glob("events.out.tfevents.*"))) == 1
    assert len(list(board.glob("events.out.tfevents.*"))) == 1
    assert not [p for p in board.parent.iterdir() if p.name.startswith(".")]


def test_the_hparams_dashboard_lists_every_trial_with_its_metrics(tmp_path):
    """What the dashboard's session-group request answers, through TensorBoard's own data provider."""
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.context import RequestContext
    from tensorboard.plugins.hparams import backend_context, list_session_groups

    study = scripted_search(tmp_path)
    write_report([str(tmp_path / "t")])
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(tmp_path / "t" / "report" / "tensorboard"))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(tmp_path / "t" / "report" / "tensorboard"))
    context = backend_context.Context(_TBContext(provider))
    request = api_pb2.ListSessionGroupsRequest(
        experiment_name="", start_index=0, slice_size=100,
        allowed_statuses=[api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS, api_pb2.STATUS_FAILURE,
                          api_pb2.STATUS_RUNNING], aggregation_type=api_pb2.AGGREGATION_AVG)
    response = list_session_groups.Handler(RequestContext(), context, "", request).run()
    assert response.total_size == len(study.trials)
    by_trial = {g.sessions[0].name.rsplit("/", 1)[-1]: g for g in response.session_groups}
    for trial in study.trials:
        group = by_trial[f"trial-{trial.number:04d}"]
        metrics = {m.name.tag: m.value for m in group.metric_values}
        assert metrics["state"] == STATE_CODES[trial.state.name]
        if trial.state == TrialState.COMPLETE:
            assert metrics["objective"] == pytest.approx(trial.value)
        assert group.hparams["optimizer.lr"].number_value == pytest.approx(trial.params["optimizer.lr"])


class _TBContext:
    """The parts of TensorBoard's TBContext the hparams backend reads."""

    def __init__(self, provider):
        self.data_provider = provider
        self.multiplexer = None
        self.flags = None


def test_optuna_is_the_source_of_the_domains(tmp_path):
    from dmlplug_builtins.tune.hparams import domains

    study = optuna.create_study()
    study.ask({"a": optuna.distributions.CategoricalDistribution(["x", 1, True]),
               "b": optuna.distributions.CategoricalDistribution([1, 2.5])})
    found = domains(study)
    assert found["a"].values == sorted(["x", "1", "True"]) and found["b"].values == [1.0, 2.5]
