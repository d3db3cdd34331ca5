"""A printed error is one clean message: no pydantic "Value error," prefix, at most one `fix:` line (#26).

The messages are read as `dmlplug validate` prints them (in process, through `dmlplug.cli.main`), for bad
recipes of several kinds made with `--set` from the quickstart recipe.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from pydantic import Field, field_validator

from dmlplug import Params
from dmlplug.cli import main
from dmlplug.errors import DataError, DmlplugError, RecipeError, _tidy_message
from dmlplug.recipe import load_recipe
from dmlplug.registry import Registry

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "recipes" / "quickstart.toml"


def _printed(capsys, *overrides: str) -> str:
    """What `dmlplug validate recipes/quickstart.toml --set ...` prints, checked to be one clean message."""
    args = ["validate", str(QUICKSTART)]
    for override in overrides:
        args += ["--set", override]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    message = capsys.readouterr().err
    assert exit_info.value.code == 2, message
    assert message.startswith("error: ") and "Traceback" not in message, message
    assert "Value error," not in message and "Assertion failed," not in message, message
    assert sum("fix:" in line for line in message.splitlines()) <= 1, message
    return message


BAD_RECIPES = {
    "wrong type": ["run.epochs=abc"],
    "unknown key of a component": ["loss.margn=0.1"],
    "unknown component": ["loss.name=multi_similarty"],
    "validator of a section": ["data.train_classes=['a']"],
    "validator of a section and of an optimizer group": ["data.train_classes=['a']", "optimizer.groups.head.lr=1",
                                                         "optimizer.groups.head.lr_mult=2"],
    "parameter of a nested table": ["loss={name = 'cross_batch_memory', loss = {name = 'contrastive', "
                                    "pos_margin = 'x'}}"],
    "unknown component of a nested table": ["loss={name = 'cross_batch_memory', loss = {name = 'nope'}}"],
    "nested table that is not a table": ["loss.distance=5"],
    "validator of a component whose message holds a fix": ["data.dataset.num_classes=3"],
    "selection metric": ["evaluation.metric=recal@1"],
    "malformed override": ["run.epochs"],
}


@pytest.mark.parametrize("overrides", BAD_RECIPES.values(), ids=BAD_RECIPES.keys())
def test_every_kind_of_bad_recipe_prints_one_clean_message(capsys, overrides):
    message = _printed(capsys, *overrides)
    assert "where: --set " in message  # each is caused by an override, which the message names


def test_a_validators_own_fix_replaces_the_general_one(capsys):
    # The glyph dataset's validator knows the smallest valid num_classes and says so in its message.
    message = _printed(capsys, "data.dataset.num_classes=3")
    assert "; fix" not in message and "num_classes >=" in message.split("fix:")[1]
    assert "dmlplug list datasets --params" not in message  # the general pointer gave way to the specific fix


def test_a_nested_tables_fix_is_kept(capsys):
    message = _printed(capsys, "loss={name = 'cross_batch_memory', loss = {name = 'nope'}}")
    assert "unknown loss 'nope'" in message
    assert "fix:   run `dmlplug list losses` to see every registered loss" in message


def test_a_missing_logger_package_prints_one_fix(capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "record_keeper" else
                        real(name, *a))
    message = _printed(capsys, "loggers=[{name = 'record_keeper'}]")
    assert "needs the 'record-keeper' package" in message and "fix:   pip install record-keeper" in message


def test_a_split_files_schema_errors_have_no_pydantic_prefix(tmp_path):
    from dmlplug_builtins.oodml.splitfile import load_splits

    split = {"id": 1, "fid": 1.0, "train": ["a", "b"], "test": ["b", "c"], "split_train": ["a"], "split_val": ["b"]}
    (tmp_path / "s.json").write_text(json.dumps({"splits": [split]}))
    with pytest.raises(DataError) as info:
        load_splits(tmp_path / "s.json")
    assert "train and test share 1 class(es)" in str(info.value) and "Value error" not in str(info.value)


class Asserting(Params):
    size: int = Field(1, description="s")

    @field_validator("size")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:  # what an `assert` raises (pytest rewrites a real assert's message in this module)
            raise AssertionError("size must be positive")
        return value


def test_an_assert_in_a_validator_reads_as_its_message(tmp_path):
    registry = Registry()
    for kind, name in [("datasets", "toy"), ("samplers", "m_per_class"), ("backbones", "timm"), ("heads", "linear"),
                       ("losses", "sized"), ("optimizers", "adam"), ("lr_schedules", "none")]:
        registry.register_callback(kind, "t")(name, lambda p, c: None, params=Asserting if name == "sized" else None)
    recipe = {"data": {"dataset": {"name": "toy"}, "sampler": {"name": "m_per_class"}}, "backbone": {"name": "timm"},
              "loss": {"name": "sized", "size": -1}}
    with pytest.raises(RecipeError) as info:
        load_recipe(recipe, registry=registry, environ={})
    assert "loss.size: size must be positive (got -1)" in str(info.value)


# ------------------------------------------------------------------------------------------ the tidying itself


@pytest.mark.parametrize(("what", "fix", "tidy_what", "tidy_fix"), [
    ("invalid:\n  a.b: Value error, too big (got 3)", "see docs", "invalid:\n  a.b: too big (got 3)", "see docs"),
    ("option: Value error, bad", None, "option: bad", None),
    ("x:\n  y: Assertion failed, z", None, "x:\n  y: z", None),
    ("a: empty split; fix: use 26 (the smallest), or more (got 3)", "see docs", "a: empty split (got 3)",
     "use 26 (the smallest), or more"),
    ("needs it, not installed (fix: pip install it, or remove this [[loggers]] table) (got 5)", "general",
     "needs it, not installed (got 5)", "pip install it, or remove this [[loggers]] table"),
    ("outer:\n  inner failed\n  where: here\n  fix:   inner fix", "outer fix", "outer:\n  inner failed\n  where: here",
     "inner fix"),
    ("two:\n  a: x; fix: same\n  b: y; fix: same\n  c: z; fix: other", None, "two:\n  a: x\n  b: y\n  c: z",
     "same; other"),
    ("prefix: kept, as is; a prefix: too", "f", "prefix: kept, as is; a prefix: too", "f"),
])
def test_tidy_message(what, fix, tidy_what, tidy_fix):
    assert _tidy_message(what, fix) == (tidy_what, tidy_fix)
    error = DmlplugError(what, where="w", fix=fix)
    assert (error.what, error.fix) == (tidy_what, tidy_fix)
    assert str(error) == error.render()
    assert sum(line.strip().startswith("fix:") for line in str(error).splitlines()) <= 1


def test_set_where_rerenders_the_message():
    error = RecipeError("bad", where="file.toml", fix="f")
    error.set_where("--set a=1 (file.toml)")
    assert str(error) == "bad\n  where: --set a=1 (file.toml)\n  fix:   f"
