"""The stored PML signatures (package data, read without torch) are what the installed PML's inspect.signature gives."""

from __future__ import annotations

import json
import subprocess
import sys

from dmlplug_builtins.pml import signatures as sig
from dmlplug_builtins.pml.generate_signatures import COMMAND


def test_the_installed_pml_has_a_stored_file_equal_to_its_signatures():
    version = sig.installed_version()
    path = sig.data_file(version)
    assert path.is_file(), f"no stored signatures for PML {version}: run {COMMAND}"
    installed = sig.from_installed_pml()
    assert installed.version == version
    assert sig.parse(json.loads(path.read_text())) == installed, f"stale: run {COMMAND}"
    assert path.read_text() == sig.render(installed)
    assert sig.signatures() == installed


def test_arguments_follow_kwargs_up_the_class_hierarchy():
    from pytorch_metric_learning.losses import ContrastiveLoss
    from pytorch_metric_learning.reducers import PerAnchorReducer

    names = [a.name for a in sig.class_arguments(ContrastiveLoss)]
    assert names[:2] == ["pos_margin", "neg_margin"]
    assert {"distance", "reducer", "embedding_regularizer", "embedding_reg_weight", "collect_stats"} <= set(names)
    (aggregation,) = [a for a in sig.class_arguments(PerAnchorReducer) if a.name == "aggregation_func"]
    assert isinstance(aggregation.default, sig.Opaque)  # a function: only its name is stored


def test_json_round_trip(tmp_path):
    stored = sig.signatures()
    assert sig.parse(json.loads(sig.render(stored))) == stored
    args = stored.args("losses", "ArcFaceLoss")
    assert args["num_classes"].required and args["margin"].default == 28.6


def test_reading_the_stored_signatures_imports_no_torch():
    code = ("from dmlplug_builtins.pml import signatures as s\ns.signatures()\nimport sys\n"
            "print('torch' in sys.modules, 'pytorch_metric_learning' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_the_generator_checks_the_stored_file():
    out = subprocess.run([sys.executable, "-m", "dmlplug_builtins.pml.generate_signatures", "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and not out.stderr, out.stdout + out.stderr


def test_another_installed_pml_is_read_directly_and_none_installed_uses_the_newest_file(monkeypatch):
    monkeypatch.setattr(sig, "installed_version", lambda: "0.0.0+no-file")
    assert sig.signatures() is sig.from_installed_pml()  # no stored file: PML itself (imports torch)
    monkeypatch.setattr(sig, "installed_version", lambda: None)
    newest = sig.stored_versions()[-1]
    assert sig.signatures() == sig.parse(json.loads(sig.data_file(newest).read_text()))
