"""The timm model names kept as data (for a torch-free ``dmlplug validate``) are the installed timm's."""

from __future__ import annotations

import subprocess
import sys

import pytest

timm = pytest.importorskip("timm")

from dmlplug_builtins.backbones import timm_models, timm_names  # noqa: E402

STALE = "plugins/backbones/timm_models.py is stale: run `python -m dmlplug_builtins.backbones.timm_names`"


def test_stored_names_are_timm_list_models():
    from timm.models import get_deprecated_models

    assert timm.__version__ == timm_models.TIMM_VERSION, STALE
    assert frozenset(timm.list_models()) == timm_models.MODELS, STALE
    assert get_deprecated_models() == timm_models.DEPRECATED, STALE
    assert timm_names.TARGET.read_text(encoding="utf-8") == timm_names.render(), STALE


def test_every_stored_name_is_a_model_timm_builds():
    assert all(timm.is_model(name) for name in timm_models.MODELS | set(timm_models.DEPRECATED))


def test_validating_a_timm_backbone_imports_neither_timm_nor_torch():
    code = ("import sys, dmlplug\n"
            "dmlplug.validate('recipes/quickstart.toml', overrides=['backbone.model=\"resnet50.a1_in1k\"'])\n"
            "try:\n"
            "    dmlplug.validate('recipes/quickstart.toml', overrides=['backbone.model=\"resnet5\"'])\n"
            "except Exception as exc:\n"
            "    assert 'did you mean' in str(exc), exc\n"
            "else:\n"
            "    raise SystemExit('resnet5 validated')\n"
            "print(sorted({'torch', 'timm'} & set(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=timm_names.TARGET.parents[2])
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_another_installed_timm_is_left_to_the_factory(monkeypatch):
    from dmlplug_builtins import backbones

    monkeypatch.setattr(backbones, "_installed_timm", lambda: "0.0.1")
    assert backbones.unknown_timm_model("a_model_from_a_newer_timm") is None
    monkeypatch.undo()
    assert "unknown timm model" in backbones.unknown_timm_model("a_model_from_a_newer_timm")
