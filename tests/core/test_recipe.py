import pytest
from pydantic import Field, model_validator

from dmlplug import Params
from dmlplug.errors import ComponentError, RecipeError
from dmlplug.registry import Registry
from tests.shared.recipes import load_recipe


class P(Params):
    margin: float = Field(0.2, gt=0, description="m")


class KParams(Params):
    k: list[int] = Field(default_factory=lambda: [1], description="k")

    def metric_names(self) -> tuple[str, ...]:
        return tuple(f"recall@{k}" for k in self.k)


class MParams(Params):
    m: int = Field(4, description="m")


class RootParams(Params):
    root: str = Field("data", description="root")


def _registry():
    reg = Registry()
    f = lambda params, ctx: None  # noqa: E731
    reg.register_callback("datasets", "t")("toy", f, params=RootParams)
    reg.register_callback("samplers", "t")("m_per_class", f, params=MParams)
    reg.register_callback("backbones", "t")("timm", f)
    reg.register_callback("heads", "t")("linear", f)
    reg.register_callback("losses", "t")("triplet", f, params=P, tags=("uses_tuples",))
    reg.register_callback("losses", "t")("arcface", f, tags=("has_parameters",))
    reg.register_callback("losses", "t")("proxy_anchor", f, tags=("proxies",))
    reg.register_callback("miners", "t")("batch_hard", f, tags=("triplets",))
    reg.register_callback("regularizers", "t")("nir", f, requires=("loss:proxies",))
    reg.register_callback("evaluators", "t")("recall", f, params=KParams)
    reg.register_callback("evaluators", "t")("map_at_r", f)
    reg.register_callback("loggers", "t")("console", f)
    reg.register_callback("loggers", "t")("tensorboard", f)
    reg.register_callback("optimizers", "t")("adam", f)  # the defaults of [optimizer] and [scheduler]
    reg.register_callback("lr_schedules", "t")("none", f)
    return reg


BASE = """
[run]
name = "t"
epochs = 2
[data]
batch_size = 8
[data.dataset]
name = "toy"
root = "${DATA_ROOT:-/nowhere}/toy"
[data.sampler]
name = "m_per_class"
[backbone]
name = "timm"
[loss]
name = "triplet"
margin = 0.3
"""


def write(tmp_path, text):
    path = tmp_path / "r.toml"
    path.write_text(text)
    return path


def test_valid_recipe_resolves_defaults_and_interpolates(tmp_path):
    r = load_recipe(write(tmp_path, BASE), registry=_registry(), environ={"DATA_ROOT": "/data"})
    assert r.components["data.dataset"].params.root == "/data/toy"
    assert r.components["loss"].params.margin == 0.3
    resolved = r.resolved()
    assert resolved["loss"] == {"name": "triplet", "weight": 1.0, "margin": 0.3}
    assert resolved["head"]["name"] == "linear"
    # the resolved TOML is itself a valid recipe that resolves to the same thing
    again = load_recipe(write(tmp_path, r.dumps()), registry=_registry(), environ={})
    assert again.resolved() == resolved


def test_default_used_when_variable_unset(tmp_path):
    r = load_recipe(write(tmp_path, BASE), registry=_registry(), environ={})
    assert r.components["data.dataset"].params.root == "/nowhere/toy"


def test_unset_variable_without_default(tmp_path):
    text = BASE.replace("${DATA_ROOT:-/nowhere}", "${DMLPLUG_DATA}")
    with pytest.raises(RecipeError, match="DMLPLUG_DATA is not set"):
        load_recipe(write(tmp_path, text), registry=_registry(), environ={})


def test_overrides_parse_toml_values_and_index_lists(tmp_path):
    text = BASE + '\n[[regularizers]]\nname = "nir"\nweight = 1.0\n'.replace("nir", "nir")
    text = text.replace('name = "triplet"\nmargin = 0.3', 'name = "proxy_anchor"')
    r = load_recipe(write(tmp_path, text), ["run.epochs=5", "regularizers[0].weight=2.5", "run.name=abc"],
                    registry=_registry(), environ={})
    assert r.recipe.run.epochs == 5 and r.recipe.run.name == "abc"
    assert r.components["regularizers[0]"].options.weight == 2.5


@pytest.mark.parametrize(("text", "value"), [
    ("3", 3), (" 0.5", 0.5), ("[1, 5]", [1, 5]), ("true", True), ('"quoted text"', "quoted text"),
    ("cpu", "cpu"), (" cpu ", "cpu"), ("a,b", "a,b"), ("", ""), ("1e-3", 0.001),
    ("resnet50.a1_in1k", "resnet50.a1_in1k"),
])
def test_a_command_line_value_is_toml_when_it_reads_as_toml_else_the_stripped_text(text, value):
    # The one reader of KEY=VALUE items: --set of run and validate, evaluate's and ooDML's --set, tune's and
    # sweep's overrides and grid values all go through it.
    from dmlplug import read_value

    assert read_value(text) == value and type(read_value(text)) is type(value)


def test_syntax_error_reports_line_and_column(tmp_path):
    with pytest.raises(RecipeError) as err:
        load_recipe(write(tmp_path, BASE + "\n[loss\n"), registry=_registry(), environ={})
    assert "line" in str(err.value) and "column" in str(err.value) and "r.toml" in str(err.value)


def test_unknown_section_and_key_suggest(tmp_path):
    with pytest.raises(RecipeError) as err:
        load_recipe(write(tmp_path, BASE + "\n[optimiser]\nlr = 1\n"), registry=_registry(), environ={})
    assert "optimiser: unknown key (did you mean 'optimizer'?)" in str(err.value)
    with pytest.raises(RecipeError) as err:
        load_recipe(write(tmp_path, BASE.replace("epochs = 2", "epoch = 2")), registry=_registry(), environ={})
    assert "run.epoch" in str(err.value) and "'epochs'" in str(err.value)


def test_wrong_type_and_range(tmp_path):
    with pytest.raises(RecipeError, match="run.epochs"):
        load_recipe(write(tmp_path, BASE.replace("epochs = 2", 'epochs = "two"')), registry=_registry(), environ={})
    with pytest.raises(RecipeError, match="loss.margin"):
        load_recipe(write(tmp_path, BASE.replace("margin = 0.3", "margin = -1")), registry=_registry(), environ={})


def test_unknown_component_suggests(tmp_path):
    with pytest.raises(ComponentError) as err:
        load_recipe(write(tmp_path, BASE.replace('"triplet"', '"triplett"')), registry=_registry(), environ={})
    assert "did you mean 'triplet'" in str(err.value) and "loss.name" in str(err.value)


def test_miner_with_loss_that_ignores_tuples_is_rejected(tmp_path):
    text = BASE.replace('name = "triplet"\nmargin = 0.3', 'name = "arcface"') + '\n[miner]\nname = "batch_hard"\n'
    with pytest.raises(RecipeError, match="ignores mined tuples"):
        load_recipe(write(tmp_path, text), registry=_registry(), environ={})


def test_requirement_on_loss_tag(tmp_path):
    text = BASE + '\n[[regularizers]]\nname = "nir"\n'
    with pytest.raises(RecipeError, match="needs a loss with 'proxies'"):
        load_recipe(write(tmp_path, text), registry=_registry(), environ={})


def test_engine_option_type_checked(tmp_path):
    with pytest.raises(RecipeError, match="loss.weight"):
        load_recipe(write(tmp_path, BASE.replace("margin = 0.3", 'margin = 0.3\nweight = "x"')),
                    registry=_registry(), environ={})


def test_missing_file():
    with pytest.raises(RecipeError, match="not found"):
        load_recipe("no/such/recipe.toml", registry=_registry())


class Required(Params):
    size: int = Field(description="s")


def test_one_formatter_for_recipe_sections_and_component_params(tmp_path):
    reg = _registry()
    reg.register_callback("losses", "t")("sized", lambda p, c: None, params=Required)
    text = BASE.replace('name = "triplet"\nmargin = 0.3', 'name = "sized"') + "\n[evaluation]\nmetrik = 1\n"
    with pytest.raises(RecipeError) as err:
        load_recipe(write(tmp_path, text), registry=reg, environ={})
    assert "evaluation.metrik: unknown key (did you mean 'metric'?)" in str(err.value)  # nested section
    with pytest.raises(RecipeError) as err:
        load_recipe(write(tmp_path, BASE.replace('name = "triplet"\nmargin = 0.3', 'name = "sized"')),
                    registry=reg, environ={})
    assert "loss.size: missing (required)" in str(err.value)  # component params use the same wording


# ------------------------------------------------------------------------------------------ where: the override (#26)


@pytest.mark.parametrize(("override", "error"), [
    ("loss.margin=abc", RecipeError),  # a component's parameter of the wrong type
    ("run.epochs=abc", RecipeError),  # a recipe key of the wrong type
    ("loss.name=triplett", ComponentError),  # an unknown component
    ("loss.size=3", RecipeError),  # a key the component does not take
])
def test_an_error_about_an_overridden_key_names_the_override(tmp_path, override, error):
    with pytest.raises(error) as info:
        load_recipe(write(tmp_path, BASE), [override], registry=_registry(), environ={})
    assert info.value.where.startswith(f"--set {override} ("), info.value.where
    assert f"where: --set {override}" in str(info.value)  # the printed message follows


def test_the_place_the_error_named_follows_the_override(tmp_path):
    with pytest.raises(RecipeError) as info:
        load_recipe(write(tmp_path, BASE), ["loss.margin=abc"], registry=_registry(), environ={})
    assert info.value.where == "--set loss.margin=abc (loss)"
    with pytest.raises(RecipeError) as info:
        load_recipe(write(tmp_path, BASE), ["run.epochs=abc"], registry=_registry(), environ={})
    assert info.value.where == f"--set run.epochs=abc ({tmp_path / 'r.toml'})"


def test_an_override_of_a_whole_table_or_list_item_is_named(tmp_path):
    with pytest.raises(RecipeError) as info:
        load_recipe(write(tmp_path, BASE), ["loss={name = 'triplet', margin = -1}"], registry=_registry(),
                    environ={})
    assert info.value.where.startswith("--set loss={name = 'triplet', margin = -1} (")
    text = BASE + '\n[[regularizers]]\nname = "nir"\n'
    text = text.replace('name = "triplet"\nmargin = 0.3', 'name = "proxy_anchor"')
    with pytest.raises(RecipeError) as info:  # a list index written either way
        load_recipe(write(tmp_path, text), ["regularizers.0.weight=x"], registry=_registry(), environ={})
    assert info.value.where.startswith("--set regularizers.0.weight=x (")


def test_dict_overrides_as_dmlplug_run_passes_them_are_named_as_typed(tmp_path):
    with pytest.raises(RecipeError) as info:
        load_recipe(write(tmp_path, BASE), {"loss.margin": "abc", "run.epochs": 3}, registry=_registry(),
                    environ={})
    assert info.value.where == "--set loss.margin=abc (loss)"
    with pytest.raises(RecipeError) as info:
        load_recipe(write(tmp_path, BASE), {"run.name": "x", "data.batch_size": [1, "a"]}, registry=_registry(),
                    environ={})
    assert info.value.where.startswith('--set data.batch_size=[1, "a"] (')


def test_an_error_the_overrides_did_not_cause_keeps_its_place(tmp_path):
    with pytest.raises(RecipeError) as info:  # the file's loss.margin, not the overridden run.epochs
        load_recipe(write(tmp_path, BASE.replace("margin = 0.3", "margin = -1")), ["run.epochs=3", "loss.weight=2"],
                    registry=_registry(), environ={})
    assert info.value.where == "loss"
    with pytest.raises(RecipeError) as info:  # a sibling key of the same table is not to blame either
        load_recipe(write(tmp_path, BASE.replace("margin = 0.3", "margn = 1")), ["loss.margin=0.5"],
                    registry=_registry(), environ={})
    assert info.value.where == "loss"


class Ordered(Params):
    low: float = Field(0.0, description="l")
    high: float = Field(1.0, description="h")

    @model_validator(mode="after")
    def _ordered(self) -> "Ordered":
        if self.low >= self.high:
            raise ValueError("low must be below high")
        return self


def test_a_check_of_a_whole_table_names_the_override_that_changed_it(tmp_path):
    reg = _registry()
    reg.register_callback("losses", "t")("ordered", lambda p, c: None, params=Ordered)
    text = BASE.replace('name = "triplet"\nmargin = 0.3', 'name = "ordered"')
    with pytest.raises(RecipeError, match="loss: low must be below high") as info:
        load_recipe(write(tmp_path, text), ["loss.low=2"], registry=reg, environ={})
    assert info.value.where == "--set loss.low=2 (loss)"
    # A check across sections (the selection metric against the evaluators) is not about the overridden key.
    text = BASE + '\n[[evaluators]]\nname = "recall"\nk = [1]\n[evaluation]\nmetric = "recall@1"\n'
    with pytest.raises(RecipeError) as info:
        load_recipe(write(tmp_path, text), ["evaluators.0.k=[2]"], registry=_registry(), environ={})
    assert info.value.where.endswith("r.toml: [evaluation] metric")


def test_malformed_overrides_name_themselves(tmp_path):
    cases = {"run.epochs": "not of the form", "regularizers.3.weight=2": "index 3 does not exist",
             "run.epochs.x=1": "not a table", "=1": "empty override key"}
    for override, phrase in cases.items():
        with pytest.raises(RecipeError, match=phrase) as info:
            load_recipe(write(tmp_path, BASE), [override], registry=_registry(), environ={})
        assert info.value.where == f"--set {override}"


def test_an_unset_variable_in_an_override_names_the_override(tmp_path):
    with pytest.raises(RecipeError, match="NOPE is not set") as info:
        load_recipe(write(tmp_path, BASE), ["data.dataset.root=${NOPE}"], registry=_registry(), environ={})
    assert info.value.where == f"--set data.dataset.root=${{NOPE}} ({tmp_path / 'r.toml'}: data.dataset.root)"
