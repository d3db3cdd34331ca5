"""The timm model names stored as package data (for a torch-free ``dmlplug validate``), and the fallback to timm."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import timm

from dmlplug_builtins import backbones
from dmlplug_builtins.backbones import timm_names

ROOT = Path(__file__).resolve().parents[2]
STALE = (f"plugins/backbones/timm_names_data/{timm.__version__}.json is missing or stale: "
         "run `python -m dmlplug_builtins.backbones.timm_names`")


def test_the_stored_file_for_the_installed_timm_is_what_it_lists(tmp_path):
    from timm.models import get_deprecated_models

    stored = timm_names.data_file(timm.__version__)
    assert stored.is_file(), STALE
    assert timm_names.installed_version() == timm.__version__
    names = timm_names.known_names()
    assert names.version == timm.__version__, STALE
    assert names.models == frozenset(timm.list_models()), STALE
    assert names.deprecated == get_deprecated_models(), STALE
    assert names.pretrained == frozenset(timm.list_pretrained()), STALE
    tagged = {name for name in timm.list_models(include_tags=True) if "." in name}
    assert names.untrained == frozenset(tagged) - names.pretrained, STALE
    # What the generator writes now is byte for byte the stored file.
    written = timm_names.write(tmp_path)
    assert written.name == stored.name
    assert written.read_text(encoding="utf-8") == stored.read_text(encoding="utf-8"), STALE


def test_every_stored_file_is_named_after_its_timm_version():
    files = sorted(timm_names.DATA_DIR.glob("*.json"))
    assert files
    for path in files:
        assert json.loads(path.read_text(encoding="utf-8"))["timm_version"] == path.stem, path


def test_every_stored_name_is_a_model_timm_builds():
    names = timm_names.known_names()
    assert all(timm.is_model(name) for name in names.models | set(names.deprecated))


def test_validating_a_timm_backbone_imports_neither_timm_nor_torch():
    assert timm_names.data_file(timm.__version__).is_file(), STALE
    code = ("import sys, dmlplug\n"
            "dmlplug.validate('recipes/quickstart.toml', overrides=['backbone.model=\"resnet50.a1_in1k\"'])\n"
            "try:\n"
            "    dmlplug.validate('recipes/quickstart.toml', overrides=['backbone.model=\"resnet5\"'])\n"
            "except Exception as exc:\n"
            "    assert 'did you mean' in str(exc), exc\n"
            "else:\n"
            "    raise SystemExit('resnet5 validated')\n"
            "assert 'dmlplug_builtins.backbones.timm_names' in sys.modules\n"
            "print(sorted({'torch', 'timm'} & set(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.parametrize("installed", [None, "0.0.1"], ids=["same-version", "another-version"])
def test_without_a_stored_file_the_names_are_read_from_the_installed_timm(installed, monkeypatch, tmp_path):
    monkeypatch.setattr(timm_names, "DATA_DIR", tmp_path)  # no file for any version
    if installed is not None:
        monkeypatch.setattr(timm_names, "installed_version", lambda: installed)
    assert not timm_names.data_file(timm_names.installed_version()).exists()

    names = timm_names.known_names()
    assert names is timm_names.from_installed_timm()  # read from timm, once per process
    assert names.version == timm.__version__ and "resnet50" in names.models
    assert backbones.unknown_timm_model("resnet50") is None
    assert backbones.unknown_timm_model("resnet50.a1_in1k") is None
    problem = backbones.unknown_timm_model("resnet5")
    assert problem and "unknown timm model 'resnet5'" in problem and "did you mean 'resnet50'" in problem


def test_without_timm_installed_names_are_left_to_the_factory(monkeypatch):
    monkeypatch.setattr(timm_names, "installed_version", lambda: None)
    assert timm_names.known_names() is None
    assert backbones.unknown_timm_model("resnet5") is None
    monkeypatch.undo()
    assert "unknown timm model" in backbones.unknown_timm_model("resnet5")


def test_hub_names_are_left_to_the_factory():
    assert backbones.unknown_timm_model("hf-hub:timm/anything") is None


def test_a_stored_file_without_pretrained_names_judges_no_weights(monkeypatch, tmp_path):
    # Files written before the pretrained tags were stored: tags and weights are left to the factory.
    (tmp_path / f"{timm.__version__}.json").write_text(
        json.dumps({"timm_version": timm.__version__, "models": ["resnet50"], "deprecated": {}}), encoding="utf-8")
    monkeypatch.setattr(timm_names, "DATA_DIR", tmp_path)
    names = timm_names.known_names()
    assert names.pretrained is None and names.untrained is None
    assert backbones.unknown_timm_model("resnet50.anything") is None
    assert backbones.pretrained_problem("resnet50.anything", True) is None
