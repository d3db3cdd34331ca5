"""``on_bundle_exported``: called after ``dmlplug export`` wrote and verified a bundle; its failures keep the bundle."""

from __future__ import annotations

import json

import pytest
from e2e import BUNDLE_RUN_SETS, TINY_RECIPE

import dmlplug
from dmlplug.bundle.errors import BundleError
from dmlplug.errors import RunError

#: The quickest export: TorchScript, no verification images, no calibration.
QUICK = {"format": "torchscript", "images": 0, "calibrate": False}


class ExportWatcher:
    """Records what the hook sees (the bundle folder's files at that moment); answers a line or raises."""

    def __init__(self, answer: str | None = None, error: Exception | None = None) -> None:
        self.answer, self.error = answer, error
        self.calls: list[dict] = []

    @dmlplug.hookimpl
    def on_bundle_exported(self, bundle, manifest, run_dir, log_model):
        self.calls.append({"bundle": bundle, "files": sorted(p.name for p in bundle.iterdir()),
                           "manifest": dict(manifest), "run_dir": run_dir, "log_model": log_model})
        if self.error is not None:
            raise self.error
        return self.answer


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("exported_hook")
    recipe = folder / "tiny.toml"
    recipe.write_text(TINY_RECIPE)
    assert dmlplug.run(recipe, overrides=BUNDLE_RUN_SETS, out=folder / "run", quiet=True).status == "completed"
    return folder / "run"


@pytest.mark.hook("on_bundle_exported")
def test_the_hook_sees_the_complete_bundle_and_its_line_is_printed(run_dir, use_host, tmp_path, capsys):
    watcher = ExportWatcher(answer="watcher: logged the bundle as model 7")
    use_host((watcher, "hooks_exported"))
    bundle = tmp_path / "bundle"
    manifest = dmlplug.export(run_dir, bundle, log_model=True, **QUICK)
    (call,) = watcher.calls
    assert call["bundle"] == bundle and call["files"] == ["bundle.json", "model.pt"]  # complete when called
    assert call["manifest"] == manifest == json.loads((bundle / "bundle.json").read_text())
    assert call["run_dir"] == run_dir and call["log_model"] is True
    assert "watcher: logged the bundle as model 7" in capsys.readouterr().err


@pytest.mark.hook("on_bundle_exported")
def test_a_failing_plugin_fails_the_export_but_the_bundle_stays(run_dir, use_host, tmp_path):
    watcher = ExportWatcher(error=RunError("the tracker is down", where="tracker.json", fix="start the tracker"))
    use_host((watcher, "hooks_exported"))
    bundle = tmp_path / "bundle"
    with pytest.raises(BundleError) as info:
        dmlplug.export(run_dir, bundle, **QUICK)
    assert watcher.calls[0]["log_model"] is False  # the default: asked for nothing
    message = info.value.render()
    assert message.startswith(f"the bundle {bundle} was written and verified (it stays), but plugin "
                              "'hooks_exported': the tracker is down")
    assert "where: tracker.json" in message and "fix:   start the tracker" in message
    assert dmlplug.load_bundle(bundle).embedding_size == 8


@pytest.mark.hook("on_bundle_exported")
def test_log_model_that_no_plugin_honours_fails_but_the_bundle_stays(run_dir, use_host, tmp_path):
    use_host()  # the built-ins: the mlflow logger's hook logs nothing for a run it did not track
    bundle = tmp_path / "bundle"
    with pytest.raises(BundleError) as info:
        dmlplug.export(run_dir, bundle, log_model=True, **QUICK)
    message = info.value.render()
    assert f"the bundle {bundle} was written and verified (it stays), but no plugin logged it as a model" in message
    assert "export without --log-model" in message and 'name = "mlflow"' in message
    assert (bundle / "bundle.json").is_file()
