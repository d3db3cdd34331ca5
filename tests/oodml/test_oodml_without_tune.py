"""ooDML without the tune plugin: only sharing a sweep's runs between workers (``oodml run --worker``,
``--storage``) needs its public grid engine; with the plugin disabled or missing that stops with one clear error
before anything is written, and a plain sweep runs without the plugin's package ever being imported."""

import os
import subprocess
import sys
import textwrap

import pytest
from e2e import TINY_RECIPE, run_cli

#: The CLI in a process where the tune plugin's package cannot be imported (a None entry in sys.modules blocks it).
WITHOUT_TUNE = ("import sys; sys.modules['dmlplug_builtins.tune'] = None; from dmlplug.cli import main; "
                "main(sys.argv[1:])")


@pytest.mark.parametrize(("how", "why"), [("disabled", "which is not loaded"), ("missing", "which failed to load")])
def test_shared_runs_without_the_tune_plugin_are_one_clear_error(tmp_path, how, why):
    recipe = tmp_path / "r.toml"
    recipe.write_text(TINY_RECIPE)
    args = ["oodml", "run", recipe, "--splits", tmp_path / "splits.json", "--out", tmp_path / "out", "--worker"]
    if how == "disabled":
        result = run_cli(*args, env={"DMLPLUG_DISABLE_PLUGINS": "tune"}, timeout=300)
    else:
        result = subprocess.run([sys.executable, "-c", WITHOUT_TUNE, *map(str, args)], capture_output=True,
                                text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: dmlplug oodml run --worker shares the runs between workers through the "
                                    f"grid engine of the tune plugin, {why}"), result.stderr
    assert "fix:   enable the tune plugin" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_plain_sweep_needs_no_tune_plugin(tmp_path):
    # run_sweep with a stand-in runner, in a process where the tune plugin is disabled and cannot be imported
    script = textwrap.dedent(f"""
        import json, sys
        sys.modules["dmlplug_builtins.tune"] = None
        import dmlplug
        from dmlplug_builtins.oodml.splitfile import OodSplit, SplitFile, save_splits
        from dmlplug_builtins.oodml.sweep import run_sweep

        bundle = dmlplug.create("dataset", "glyphs", num_classes=40, images_per_class=8)
        names = bundle.train.class_names + bundle.test.class_names
        split = OodSplit(id=1, fid=1.0, train=names[:20], test=names[20:], split_train=names[:15],
                         split_val=names[15:20], episodes={{}})
        splits = save_splits({str(tmp_path / "s.json")!r}, SplitFile(splits=[split]))

        def runner(recipe, overrides, *, out, **options):
            out.mkdir(parents=True)
            (out / "results.json").write_text(json.dumps({{"status": "completed", "metrics": {{}}}}))

        report = run_sweep({str(tmp_path / "r.toml")!r}, splits, seeds=[0, 1], sweep_dir={str(tmp_path / "out")!r},
                           runner=runner, check_data=False, echo=lambda _: None)
        print("ran", report.ran)
    """)
    (tmp_path / "r.toml").write_text(TINY_RECIPE)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "DMLPLUG_DISABLE_PLUGINS": "tune"})
    assert result.returncode == 0, result.stderr
    assert "ran [(1, 0), (1, 1)]" in result.stdout
