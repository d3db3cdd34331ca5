"""Bad input: one clear message, exit status 2, no traceback (unless --debug), nothing written."""


import pytest
import torch
from e2e import TINY_RECIPE, broken_plugin_site, run_cli


def assert_clean_failure(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)


@pytest.mark.parametrize(
    ("edit", "needles"),
    [
        (lambda t: t + "\n[loss\n", ["TOML syntax error", "line", "column"]),
        (lambda t: t.replace("epochs = 1", "epoch = 1"), ["run.epoch", "did you mean 'epochs'"]),
        (lambda t: t.replace("batch_size = 32", "batch_size = -3"), ["data.batch_size", "greater than or equal"]),
        (lambda t: t.replace('name = "multi_similarity"', 'name = "multi_similarty"'),
         ["unknown loss 'multi_similarty'", "did you mean 'multi_similarity'", "dmlplug list losses"]),
        (lambda t: t.replace('name = "glyphs"\nnum_classes = 40\nimages_per_class = 8',
                             'name = "folder"\nroot = "/nonexistent/my_images"'), ["/nonexistent/my_images"]),
    ],
    ids=["syntax", "unknown-key", "out-of-range", "unknown-component", "missing-dataset-folder"],
)
def test_bad_recipes(tmp_path, edit, needles):
    recipe = tmp_path / "bad.toml"
    recipe.write_text(edit(TINY_RECIPE))
    out = tmp_path / "run"
    assert_clean_failure(run_cli("run", recipe, "--out", out), *needles)
    assert not out.exists()


def test_validate_reports_the_same_errors_quickly(tmp_path):
    recipe = tmp_path / "bad.toml"
    recipe.write_text(TINY_RECIPE.replace("[optimizer]", "[optimiser]"))
    assert_clean_failure(run_cli("validate", recipe), "did you mean 'optimizer'")
    recipe.write_text(TINY_RECIPE)
    proc = run_cli("validate", recipe)
    assert proc.returncode == 0 and "OK" in proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without a GPU")
def test_cuda_without_gpu(tiny_recipe, tmp_path):
    assert_clean_failure(run_cli("run", tiny_recipe, "--device", "cuda", "--out", tmp_path / "r"), "no CUDA GPU")
    assert not (tmp_path / "r").exists()


def test_unwritable_output_directory(tiny_recipe, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    assert_clean_failure(run_cli("run", tiny_recipe, "--out", blocker / "run"), "cannot write the run directory")


def test_existing_run_directory_is_never_overwritten(tiny_recipe, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    assert_clean_failure(run_cli("run", tiny_recipe, "--out", out), "already exists")
    assert (out / "precious.txt").read_text() == "keep me"


def test_debug_shows_the_traceback(tmp_path):
    recipe = tmp_path / "bad.toml"
    recipe.write_text(TINY_RECIPE.replace('name = "multi_similarity"', 'name = "nope"'))
    proc = run_cli("--debug", "validate", recipe)
    assert proc.returncode == 2 and "Traceback" in proc.stderr


def test_broken_plugin_is_reported_and_does_not_take_the_cli_down(tiny_recipe, tmp_path):
    env = {"PYTHONPATH": str(broken_plugin_site(tmp_path / "site"))}
    proc = run_cli("plugins", env=env)
    assert proc.returncode == 0
    assert "broken" in proc.stdout and "LOAD ERROR" in proc.stdout and "this_dependency_does_not_exist" in proc.stdout
    proc = run_cli("validate", tiny_recipe, env=env)
    assert proc.returncode == 0, proc.stderr
    # a recipe that needs a component the broken plugin would have provided names the plugin
    recipe = tmp_path / "needs.toml"
    recipe.write_text(TINY_RECIPE.replace('name = "multi_similarity"', 'name = "broken_loss"'))
    assert_clean_failure(run_cli("validate", recipe, env=env), "unknown loss 'broken_loss'", "broken")
