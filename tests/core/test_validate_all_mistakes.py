"""`dmlplug validate` reports every mistake of a recipe in one pass, each with its where and did-you-mean (#41)."""

from __future__ import annotations

import pytest
from e2e import TINY_RECIPE

from dmlplug.cli import main
from dmlplug.errors import ComponentError, RecipeError
from dmlplug.recipe.mistakes import RecipeMistakes
from tests.shared.recipes import load_recipe

#: A misspelt loss name, a misspelt [optimizer] key and a misspelt [evaluation] key: three tables, three typos.
THREE_TYPOS = (TINY_RECIPE.replace('name = "multi_similarity"', 'name = "multi_similarty"')
               .replace("lr = 1e-3", "lrr = 1e-3")
               .replace("[optimizer]", '[evaluation]\nmetrc = "recall@1"\n[optimizer]'))


def test_three_typos_in_three_tables_are_one_message_with_three_suggestions(tmp_path, capsys):
    recipe = tmp_path / "typos.toml"
    recipe.write_text(THREE_TYPOS)
    with pytest.raises(SystemExit) as stop:
        main(["validate", str(recipe)])
    assert stop.value.code == 2
    message = capsys.readouterr().err
    assert message.startswith("error: the recipe has 3 mistakes:") and "Traceback" not in message
    assert "1. invalid recipe:\n       evaluation.metrc: unknown key (did you mean 'metric'?)" in message
    assert "2. unknown loss 'multi_similarty' (did you mean 'multi_similarity'" in message
    assert f"     where: {recipe}: loss.name" in message
    assert "3. optimizer.lrr: unknown key (did you mean 'lr'?)" in message
    # The checks across sections need every table valid: the message says they come next.
    assert message.rstrip().endswith("the checks across sections (selection metric, splits, batch size, "
                                     "capabilities) run once these are corrected")


def test_each_mistake_keeps_its_own_where_and_fix_and_its_override():
    with pytest.raises(RecipeMistakes) as info:
        load_recipe({**_tiny(), "loss": {"name": "multi_similarity", "alpha": "x"}},
                    overrides=["head.embeding_size=8", "run.epochs=-1"])
    structure, head, loss = info.value.mistakes  # in the order the recipe is checked
    assert "run.epochs" in structure.what and structure.where.startswith("--set run.epochs=-1")
    assert "did you mean 'embedding_size'" in head.what and head.where.startswith("--set head.embeding_size=8")
    assert "loss.alpha" in loss.what and "--set" not in (loss.where or "") and "dmlplug list losses" in loss.fix
    assert isinstance(info.value, RecipeError)


def test_one_mistake_is_raised_as_it_always_was():
    with pytest.raises(ComponentError, match="unknown loss 'multi_similarty'") as info:
        load_recipe({**_tiny(), "loss": {"name": "multi_similarty"}})
    assert not isinstance(info.value, RecipeMistakes)


def test_two_checks_across_sections_fail_together_but_a_batch_is_counted_only_for_a_size_the_sampler_takes():
    # An unknown selection metric and a batch size that m = 4 does not divide: both found in one pass; the classes
    # per batch of that batch size (a dependent check) are not judged.
    with pytest.raises(RecipeMistakes) as info:
        load_recipe(_tiny(), overrides=["evaluation.metric=recall@3", "data.batch_size=6"])
    assert [m.what.split(" ")[0] for m in info.value.mistakes] == ["evaluation.metric", "[data]"]


def _tiny() -> dict:
    import tomllib

    return tomllib.loads(TINY_RECIPE)
