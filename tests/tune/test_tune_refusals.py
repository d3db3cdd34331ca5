"""Tuning refuses what it cannot honour (issue #41 part 3): every value and combination a space can draw is checked
against the recipe's own cross-field rules, the protocol's fixed keys and class lists are refused, the metric is
checked against the one list `dmlplug validate` uses, a trial that fails anyway is one console line with its
traceback in its folder, and a report never reads another search's study or writes into its directory."""

import textwrap

import pytest
from e2e import run_cli
from test_tune_space import RECIPE, write_space
from tiny import registry, scoring_runner, write_tiny

import dmlplug
from dmlplug.errors import RecipeError, RunError
from dmlplug_builtins.tune.protocol import check_search
from dmlplug_builtins.tune.space import check_space, load_space


def refusal(tmp_path, body, recipe=RECIPE):
    """The error ``dmlplug tune validate`` gives for a space of ``body`` over ``recipe``."""
    space = write_space(tmp_path, body)
    (tmp_path / "recipe.toml").write_text(recipe)
    with pytest.raises(RecipeError) as caught:
        check_search(load_space(space, registry=registry()), [])
    return caught.value


def test_an_inner_value_of_an_int_range_is_checked(tmp_path):
    # batch_size = 8: m = 2 and m = 4 (the ends) divide it, m = 3 does not
    error = refusal(tmp_path, '[params."data.sampler.m"]\ntype = "int"\nlow = 2\nhigh = 4\n')
    assert error.what.startswith("the space can draw data.sampler.m = 3, which the recipe refuses: [data] "
                                 "batch_size = 8 is not a multiple of 3")
    assert error.where == f'{tmp_path / "s.space.toml"}: params."data.sampler.m"'


def test_values_that_pass_alone_are_checked_together(tmp_path):
    # batch 4 with the recipe's m = 2, and m = 4 with its batch of 8, hold two classes; batch 4 with m = 4 one
    error = refusal(tmp_path, '[params."data.batch_size"]\ntype = "categorical"\nchoices = [8, 4]\n'
                              '[params."data.sampler.m"]\ntype = "categorical"\nchoices = [2, 4]\n')
    assert error.what.startswith("the space can draw data.batch_size = 4, data.sampler.m = 4, which the recipe "
                                 "refuses: every batch holds at most 1 class")
    assert "constrain the space" in error.fix


def test_a_space_too_large_to_check_is_refused_with_the_fix(tmp_path):
    error = refusal(tmp_path, '[params."data.dataset.images_per_class"]\ntype = "int"\nlow = 2\nhigh = 1000\n'
                              '[params."data.sampler.m"]\ntype = "int"\nlow = 2\nhigh = 4\n')
    assert error.what == "the space can draw 2997 combinations of values, more than the 2048 its validation checks"
    assert error.fix.startswith("give the int ranges data.dataset.images_per_class a step")


@pytest.mark.parametrize(("key", "body", "message"), [
    ("run.epochs", 'type = "int"\nlow = 1\nhigh = 2\n', "run.epochs cannot be searched: every trial trains"),
    ("data.train_classes", 'type = "categorical"\nchoices = ["a"]\n', "data.train_classes cannot be searched"),
])
def test_keys_the_protocol_fixes_are_refused_in_a_search_not_in_a_sweep(tmp_path, key, body, message):
    error = refusal(tmp_path, f'[params."{key}"]\n{body}')
    assert error.what.startswith(message) and error.where.endswith(f'params."{key}"')
    if key == "run.epochs":  # a sweep trains every value to the end: its grid may vary the epochs
        check_space(load_space(tmp_path / "s.space.toml", registry=registry()), [])


def test_a_recipe_with_class_lists_is_refused(tmp_path):
    lists = RECIPE.replace("batch_size = 8\n", 'batch_size = 8\ntrain_classes = ["a", "b"]\n'
                                                'test_classes = ["c", "d"]\n')
    error = refusal(tmp_path, '[params."loss.alpha"]\ntype = "float"\nlow = 1\nhigh = 2\n', recipe=lists)
    assert error.what.startswith("the recipe sets [data] train_classes, test_classes: they re-split the dataset")


RERANKED = RECIPE.replace('metric = "map@r"\n', 'metric = "map@r"\nrerank = ["aqe"]\n')


@pytest.mark.parametrize(("metric", "accepted"), [("map@r+aqe", True), ("map@r+aq", False)])
def test_tune_and_validate_accept_the_same_metric_names(tmp_path, metric, accepted):
    recipe = tmp_path / "plain.toml"
    recipe.write_text(RERANKED)
    space = write_space(tmp_path, f'[tune]\nmetric = "{metric}"\n[params."loss.alpha"]\ntype = "float"\nlow = 1\n'
                                  'high = 2\n')
    (tmp_path / "recipe.toml").write_text(RERANKED)
    loaded = load_space(space, registry=registry())
    if accepted:
        dmlplug.validate(str(recipe), [f"evaluation.metric={metric}"])
        check_search(loaded, [])
        return
    with pytest.raises(RecipeError, match="did you mean 'map@r\\+aqe'"):
        dmlplug.validate(str(recipe), [f"evaluation.metric={metric}"])
    with pytest.raises(RecipeError, match="\\[tune\\] metric = 'map@r\\+aq' is not computed .*\\(did you mean "
                                          "'map@r\\+aqe'"):
        check_search(loaded, [])


FAILING = textwrap.dedent("""
    recipe = "recipe.toml"
    [tune]
    folds = 2
    pruner = "none"
    sampler = "random"
    [params."optimizer.lr"]
    type = "float"
    low = 1e29
    high = 1e30
""")


def test_a_failing_trial_is_one_console_line_and_its_traceback_is_in_its_folder(tmp_path):
    space = write_tiny(tmp_path)
    space.write_text(FAILING)  # validates, then the loss is NaN at the second step
    done = run_cli("tune", "run", space, "--dir", tmp_path / "t", "--trials", "1", "--device", "cpu")
    error = tmp_path / "t" / "trials" / "trial-0000" / "error.txt"
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"[1/1] trial 0: fail (RunError: loss term 'loss' is nan at step 2 (epoch 1), "
                                        f"see {error})"]
    assert "Traceback" not in done.stderr and "failed with" not in done.stderr, done.stderr
    text = error.read_text()
    assert text.startswith("trial 0 failed: RunError: loss term 'loss' is nan") and "Traceback" in text
    assert "optimizer.lr = " in text


def test_report_refuses_a_study_of_another_search_and_writes_nothing(tmp_path):
    space = write_tiny(tmp_path)
    shared = f"sqlite:///{tmp_path / 'shared.db'}"
    from dmlplug_builtins.tune.report import write_report
    from dmlplug_builtins.tune.tune import tune

    tune(space, tmp_path / "a", trials=1, registry=registry(), storage=shared, runner=scoring_runner,
         echo=lambda _: None)
    other = space.with_name("other.space.toml")
    other.write_text(space.read_text().replace("high = 4.0", "high = 3.0"))
    tune(other, tmp_path / "b", trials=1, registry=registry(), runner=scoring_runner, echo=lambda _: None)
    # b's search lives in its journal file; the shared database holds a's study under the same (default) name
    with pytest.raises(RunError, match=f"the study 'dmlplug-tune' in {shared} is not the search of {tmp_path / 'b'}"):
        write_report([str(tmp_path / "a"), str(tmp_path / "b")], storage=shared)
    assert not (tmp_path / "a" / "report").exists() and not (tmp_path / "b" / "report").exists()
    write_report([str(tmp_path / "b")])  # with its own storage it reports
    assert (tmp_path / "b" / "report" / "best.toml").is_file()
