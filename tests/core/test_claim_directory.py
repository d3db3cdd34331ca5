"""dmlplug.files.claim_directory: the one rule by which tune, sweep and ooDML sweep own a directory."""

import json

import pytest

from dmlplug.errors import RunError
from dmlplug.files import claim_directory

COMPARE = {"identity": "recipe or --set overrides", "part": "--part"}


def claim(folder, fields, **options):
    return claim_directory(folder, "m.json", fields, what="sweep", option="--out", compare=COMPARE, **options)


def test_a_new_or_empty_directory_is_claimed_and_nothing_is_written(tmp_path):
    assert claim(tmp_path / "new", {"identity": "a"}) is None
    (tmp_path / "empty").mkdir()
    assert claim(tmp_path / "empty", {"identity": "a"}) is None
    assert not (tmp_path / "new").exists() and not list((tmp_path / "empty").iterdir())


def test_the_same_work_continues_and_gets_the_existing_manifest(tmp_path):
    (tmp_path / "m.json").write_text(json.dumps({"identity": "a", "part": "p", "seeds": [0]}))
    assert claim(tmp_path, {"identity": "a", "part": "p", "seeds": [1]}) == {"identity": "a", "part": "p",
                                                                             "seeds": [0]}


def test_other_work_is_refused_naming_what_differs(tmp_path):
    (tmp_path / "m.json").write_text(json.dumps({"identity": "a", "part": "p"}))
    with pytest.raises(RunError, match="was made with a different --part") as err:
        claim(tmp_path, {"identity": "a", "part": "q"})
    assert err.value.where == str(tmp_path / "m.json")


def test_a_value_an_older_manifest_lacks_is_compared_as_its_legacy_default(tmp_path):
    (tmp_path / "m.json").write_text(json.dumps({"identity": "a"}))
    assert claim(tmp_path, {"identity": "a", "part": "zero_shot"}, legacy={"part": "zero_shot"})["part"] == "zero_shot"
    with pytest.raises(RunError, match="different --part"):
        claim(tmp_path, {"identity": "a", "part": "few_shot"}, legacy={"part": "zero_shot"})


def test_a_directory_holding_something_else_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RunError, match="is not empty and is not a sweep directory") as err:
        claim(tmp_path, {"identity": "a"})
    assert err.value.where == "--out"
