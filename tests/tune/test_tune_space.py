"""Search spaces: the recipe field a key sets, and every bad space refused before anything trains (issue #28 item 8)."""

import textwrap
from pathlib import Path

import pytest
from e2e import run_cli
from tiny import registry

import dmlplug
from dmlplug.errors import RecipeError, RunError
from dmlplug_builtins.tune.space import check_space, condition_overrides, load_space, suggest
from dmlplug_builtins.tune.study import open_storage, open_study

RECIPE = textwrap.dedent("""
    [run]
    epochs = 1
    [data]
    batch_size = 8
    image_size = 32
    [data.dataset]
    name = "glyphs"
    num_classes = 40
    images_per_class = 4
    [data.sampler]
    name = "m_per_class"
    m = 2
    [backbone]
    name = "timm"
    model = "resnet10t"
    [loss]
    name = "multi_similarity"
    [[regularizers]]
    name = "tcm"
    weight = 0.5
    [evaluation]
    metric = "map@r"
    [[evaluators]]
    name = "map_at_r"
    [[loggers]]
    name = "console"
""")


def write_space(folder, body):
    (folder / "recipe.toml").write_text(RECIPE)
    path = folder / "s.space.toml"
    path.write_text('recipe = "recipe.toml"\n' + textwrap.dedent(body))
    return path


def test_recipe_field_reads_the_fields_own_bounds(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE)
    lr = dmlplug.recipe_field(str(recipe), "optimizer.lr")
    assert lr.bounds == {"gt": 0.0} and lr.value == 1e-4 and "engine key" in lr.owner
    m = dmlplug.recipe_field(str(recipe), "data.sampler.m")
    assert m.annotation is int and m.value == 2 and m.owner == "samplers 'm_per_class'"
    assert dmlplug.recipe_field(str(recipe), "regularizers[0].weight").bounds == {"ge": 0.0}
    assert dmlplug.recipe_field(str(recipe), "data.dataset.images_per_class").bounds == {"ge": 2.0, "le": 1000.0}
    assert dmlplug.recipe_field(str(recipe), "run.epochs").owner == "[run]"
    with pytest.raises(RecipeError, match="did you mean 'alpha'"):
        dmlplug.recipe_field(str(recipe), "loss.alpah")


def test_a_good_space_validates_and_samples_only_active_parameters(tmp_path):
    space = load_space(write_space(tmp_path, """
        [params."optimizer.lr"]
        type = "float"
        low = 1e-4
        high = 1e-2
        log = true
        [params."data.sampler.m"]             # 2 and 4 divide batch_size = 8 (3, without the step, would not)
        type = "int"
        low = 2
        high = 4
        step = 2
        [params."loss.name"]
        type = "categorical"
        choices = ["multi_similarity", "contrastive"]
        [params."loss.pos_margin"]
        type = "float"
        low = 0.0
        high = 0.5
        when = {"loss.name" = "contrastive"}
    """), registry=registry())
    check_space(space, [])
    assert condition_overrides(space, "loss.pos_margin") == {"loss.name": "contrastive"}

    class Fixed:  # a trial that takes the upper end of every range and the given category
        def __init__(self, name):
            self.name = name

        def suggest_categorical(self, key, choices):
            return self.name

        def suggest_int(self, key, low, high, step=1, log=False):
            return high

        def suggest_float(self, key, low, high, step=None, log=False):
            return high

    assert suggest(Fixed("multi_similarity"), space) == {"optimizer.lr": 1e-2, "data.sampler.m": 4,
                                                         "loss.name": "multi_similarity"}
    assert suggest(Fixed("contrastive"), space)["loss.pos_margin"] == 0.5


@pytest.mark.parametrize(("body", "message"), [
    ('[params."loss.alpah"]\ntype = "float"\nlow = 1\nhigh = 2\n', "did you mean 'alpha'"),
    ('[params."optimizer.lr"]\ntype = "float"\nlow = 0.0\nhigh = 0.1\n', "low = 0.0 must be above 0.0"),
    ('[params."data.dataset.images_per_class"]\ntype = "int"\nlow = 2\nhigh = 2000\n',
     "high = 2000.0 is above the field's maximum 1000.0"),
    ('[params."regularizers[0].weight"]\ntype = "float"\nlow = -1\nhigh = 1\n', "below the field's minimum 0.0"),
    ('[params."data.sampler.m"]\ntype = "float"\nlow = 2\nhigh = 4\n', 'is an integer field'),
    ('[params."loss.name"]\ntype = "categorical"\nchoices = []\n', "non-empty choices"),
    ('[params."loss.name"]\ntype = "categorical"\nchoices = ["multi_similarity", "arcfase"]\n',
     "loss.name = 'arcfase' is refused by the recipe"),
    ('[params."optimizer.lr"]\ntype = "float"\nlow = -1\nhigh = 1\nlog = true\n', "log = true needs a positive"),
    ('[params."loss.pos_margin"]\ntype = "float"\nlow = 0\nhigh = 1\nwhen = {"loss.name" = "contrastive"}\n',
     "no categorical parameter declared before it"),
    ('[params."run.epochs"]\ntype = "int"\nlow = 3\nhigh = 1\n', "low = 3.0 is above high = 1.0"),
])
def test_bad_spaces_are_refused_with_the_parameter_named(tmp_path, body, message):
    with pytest.raises(RecipeError, match=message) as caught:
        check_space(load_space(write_space(tmp_path, body), registry=registry()), [])
    assert str(tmp_path / "s.space.toml") in (caught.value.where or "")


LR = '[params."optimizer.lr"]\ntype = "float"\nlow = 1e-4\nhigh = 1e-2\n'


def test_sampler_and_pruner_are_a_name_or_a_table_and_do_not_change_the_study(tmp_path):
    plain = load_space(write_space(tmp_path, LR), registry=registry())
    assert plain.settings.sampler.to_dict() == {"name": "tpe", "startup_trials": 10}
    assert plain.settings.pruner.to_dict() == {"name": "median", "startup_trials": 5, "warmup_epochs": 0}
    named = load_space(write_space(tmp_path, '[tune]\nsampler = "random"\npruner = "none"\n' + LR),
                       registry=registry())
    assert (named.settings.sampler.to_dict(), named.settings.pruner.to_dict()) == ({"name": "random"},
                                                                                   {"name": "none"})
    tables = load_space(write_space(tmp_path, '[tune]\nsampler_seed = 3\nprune_at = "fold"\n[tune.sampler]\n'
                                    'name = "tpe"\nstartup_trials = 2\n[tune.pruner]\nname = "percentile"\n'
                                    'percentile = 25.0\n' + LR), registry=registry())
    assert tables.settings.sampler.params.startup_trials == 2 and tables.settings.pruner.params.percentile == 25.0
    # how trials are chosen and stopped is no part of what they measure: the study is the same
    assert plain.identity([]) == named.identity([]) == tables.identity([])


@pytest.mark.parametrize(("tune", "what", "fix"), [
    ('sampler = "tpee"', "unknown tune_sampler 'tpee' (did you mean 'tpe'", "dmlplug list tune_samplers"),
    ('pruner = {name = "median", percentile = 20}', "percentile: unknown key", "dmlplug list tune_pruners --params"),
    ('tpe_startup_trials = 8\nstartup_trials = 4\nwarmup_epochs = 2',
     "[tune] tpe_startup_trials, startup_trials, warmup_epochs: these settings moved",
     'write [tune.sampler] name = "tpe" startup_trials = 8; write [tune.pruner] name = "median" startup_trials = 4 '
     "warmup_epochs = 2"),
    ('pruner = "percentile"\npercentile = 25.0', "[tune] percentile: these settings moved",
     'write [tune.pruner] name = "percentile" percentile = 25.0'),
    ('pruner = "none"\nstartup_trials = 4', "[tune] startup_trials", "delete startup_trials"),
])
def test_unknown_samplers_and_the_old_keys_are_refused_with_the_fix(tmp_path, tune, what, fix):
    with pytest.raises(RecipeError) as caught:
        load_space(write_space(tmp_path, f"[tune]\n{tune}\n" + LR), registry=registry())
    assert what in caught.value.what and fix in (caught.value.fix or ""), caught.value


def test_the_grid_sampler_refuses_a_range(tmp_path):
    space = load_space(write_space(tmp_path, '[tune]\nsampler = "grid"\n' + LR), registry=registry())
    with pytest.raises(RunError, match="the grid sampler needs categorical parameters only; optimizer.lr is a "
                                       "float range"):
        open_study(tmp_path / "t", space, "identity", None)


def test_unreachable_storage_and_another_space_are_refused(tmp_path):
    with pytest.raises(RunError, match="cannot open the study storage postgresql://u:\\*\\*\\*@127.0.0.1:9/x"):
        open_storage(tmp_path, "postgresql://u:secret@127.0.0.1:9/x")
    space = load_space(write_space(tmp_path, '[params."run.epochs"]\ntype = "int"\nlow = 1\nhigh = 2\n'),
                       registry=registry())
    open_study(tmp_path / "t", space, "identity-a", None)
    open_study(tmp_path / "t", space, "identity-a", None)  # the same space reopens its study
    with pytest.raises(RunError, match="created with another space"):
        open_study(tmp_path / "t", space, "identity-b", None)


def test_a_search_whose_storage_fails_leaves_no_new_directory_behind(tmp_path):
    from dmlplug_builtins.tune.tune import tune

    space = write_space(tmp_path, '[params."loss.alpha"]\ntype = "float"\nlow = 1\nhigh = 2\n')
    with pytest.raises(RunError, match="cannot open the study storage"):
        tune(space, tmp_path / "t", trials=1, registry=registry(),
             storage="postgresql://u@127.0.0.1:9/x", echo=lambda _: None)
    assert not (tmp_path / "t").exists()  # neither the manifest nor the fold recipe prepare() wrote
    (tmp_path / "u").mkdir()
    (tmp_path / "u" / "notes.txt").write_text("kept")  # an existing directory keeps what was already there
    (tmp_path / "u" / "tune.json").write_text("{}")
    from dmlplug.files import withdraw

    withdraw(tmp_path / "u", ["tune.json", "recipe.toml"])
    assert [p.name for p in (tmp_path / "u").iterdir()] == ["notes.txt"]


def test_cli_refuses_a_bad_space_with_exit_code_2(tmp_path):
    space = write_space(tmp_path, '[params."loss.alpah"]\ntype = "float"\nlow = 1\nhigh = 2\n')
    done = run_cli("tune", "run", space, "--dir", tmp_path / "t", "--trials", "1")
    assert done.returncode == 2 and "did you mean 'alpha'" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "t").exists()  # nothing written before the space is checked


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[2] / "recipes").rglob("*.space.toml")),
                         ids=lambda p: p.name)
def test_every_shipped_space_validates(path):
    check_space(load_space(path, registry=registry()), [])


def test_the_documented_space_is_the_shipped_one():
    root = Path(__file__).parents[2]
    doc = (root / "docs" / "tune.md").read_text()
    block = doc.split("```toml\n# recipes/tune/quickstart.space.toml\n", 1)[1].split("```", 1)[0]
    shipped = (root / "recipes" / "tune" / "quickstart.space.toml").read_text()
    assert block.strip() in shipped  # the file has a header comment above the same text


def test_dmlplug_validate_checks_a_space_file(tmp_path, capsys):
    from dmlplug.cli import main

    good = write_space(tmp_path, '[params."loss.alpha"]\ntype = "float"\nlow = 1\nhigh = 2\n')
    main(["validate", str(good)])
    assert capsys.readouterr().out.startswith(f"{good}: OK (search space of 1 parameters over ")
    good.write_text(good.read_text().replace("high = 2", "high = 2\nlog = true\nstep = 1"))
    with pytest.raises(SystemExit) as exit_info:
        main(["validate", str(good)])
    assert exit_info.value.code == 2 and "log and step do not go together" in capsys.readouterr().err
