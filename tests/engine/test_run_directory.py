"""What a run directory records: file modes, dataset facts, parameter groups, completed epochs."""

import json
import os
import re
import stat

import pytest
from e2e import SigtermAtStep
from test_resume import SMALL

import dmlplug
from dmlplug.files import write_json
from dmlplug.plugins import get_host


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from e2e import TINY_RECIPE

    folder = tmp_path_factory.mktemp("tiny")
    recipe = folder / "tiny.toml"
    recipe.write_text(TINY_RECIPE)
    result = dmlplug.run(recipe, overrides=[*SMALL, "data.dataset.val_fraction=0.25"], out=folder / "r", quiet=True)
    return result.directory


def test_checkpoints_and_atomic_files_share_the_mode_of_a_plain_file(tiny_run, tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("x")  # what open() gives under this process's umask
    atomic = write_json(tmp_path / "atomic.json", {"a": 1})
    last, best = tiny_run / "checkpoints" / "last.pt", tiny_run / "checkpoints" / "best.pt"
    assert _mode(last) == _mode(best) == _mode(atomic) == _mode(plain)
    assert _mode(tiny_run / "results.json") == _mode(plain)


def test_atomic_writes_follow_the_umask(tmp_path):
    previous = os.umask(0o077)
    try:
        assert _mode(write_json(tmp_path / "private.json", {})) == 0o600
        os.umask(0o022)
        assert _mode(write_json(tmp_path / "shared.json", {})) == 0o644
    finally:
        os.umask(previous)


def test_data_json_records_every_split_and_the_dataset_facts(tiny_run):
    data = json.loads((tiny_run / "data.json").read_text())
    bundle = dmlplug.load_run(tiny_run).dataset
    assert data["dataset"] == "glyphs"
    for split in ("train", "val", "test"):
        source = getattr(bundle, split)
        assert data["splits"][split] == {"images": len(source), "classes": source.num_classes}
    assert data["splits"]["val"]["classes"] > 0
    # the keys every dataset gets (null where the dataset plugin does not tell) and its own info, verbatim
    assert {"root", "layout", "standard_split"} <= set(data)
    assert data["info"]["seed"] == bundle.info["seed"]


def test_model_json_counts_the_parameters_of_every_optimizer_group(tiny_run):
    model = json.loads((tiny_run / "model.json").read_text())
    loaded = dmlplug.load_run(tiny_run)
    total = sum(p.numel() for p in loaded.model.parameters())
    assert model["parameters"] == total
    groups = {g["name"]: g for g in model["parameter_groups"]}
    assert {"backbone", "head"} <= set(groups)
    assert groups["head"]["parameters"] == sum(p.numel() for p in loaded.model.head.parameters())
    assert all(g["parameters"] > 0 and g["tensors"] > 0 for g in groups.values())


@pytest.mark.parametrize(("step", "completed"), [(3, 0), (6, 1)])
def test_results_count_only_completed_epochs(tiny_recipe, tmp_path, step, completed):
    from dmlplug.engine.resume import RunInterrupted

    plugin, host = SigtermAtStep(step), get_host()
    host.pm.register(plugin, "interrupt-at")
    try:
        with pytest.raises(RunInterrupted):
            dmlplug.run(tiny_recipe, overrides=[*SMALL, "evaluation.initial=false"], out=tmp_path / "r", quiet=True)
    finally:
        host.pm.unregister(plugin)
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    assert (results["status"], results["steps"], results["epochs_completed"]) == ("interrupted", step, completed)


def test_results_json_holds_the_fields_the_docs_describe(tiny_run):
    from e2e import ROOT

    results = json.loads((tiny_run / "results.json").read_text())
    row = next(line for line in (ROOT / "docs" / "run-directory.md").read_text().splitlines()
               if line.startswith("| `results.json` |"))
    documented = set(re.findall(r"`(\w+)`", row)) - {"results"}
    assert set(results) == documented - {"error", "reason"}  # error only when failed, reason when a hook stopped it
    # A dataset with validation classes: selected on them, reported on the test split, both said.
    assert (results["selected_on"], results["reported_on"], results["select_initial"]) == ("val", "test", False)
    assert results["best_epoch"] >= 1 and results["best_metrics"] and results["selection_metrics"]
