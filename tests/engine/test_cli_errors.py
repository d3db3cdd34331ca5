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


def assert_usage_error(proc, *needles):
    """A command-line mistake: typer's usage message and exit status 2, never an internal error."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "please report" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["run"], ["Usage: dmlplug run", "Missing argument 'RECIPE'"]),
        (["validate"], ["Usage: dmlplug validate", "Missing argument 'RECIPE'"]),
        (["run", "q.toml", "--bogus"], ["Usage: dmlplug run", "No such option: --bogus"]),
        (["run", "q.toml", "--quite"], ["No such option: --quite", "--quiet"]),
        (["frobnicate"], ["Usage: dmlplug", "No such command 'frobnicate'"]),
        (["lst", "losses"], ["No such command 'lst'", "Did you mean 'list'?"]),
        (["list", "losses", "arcface", "extra"], ["Usage: dmlplug list", "unexpected extra argument"]),
        (["plugin", "new"], ["Usage: dmlplug plugin new", "Missing argument"]),
    ],
    ids=["run-no-recipe", "validate-no-recipe", "unknown-option", "misspelt-option", "unknown-command",
         "misspelt-command", "extra-argument", "plugin-new-no-name"],
)
def test_command_line_mistakes_are_usage_errors(args, needles):
    assert_usage_error(run_cli(*args), *needles)


def test_version_needs_no_command():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("dmlplug "), proc


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_works_wherever_it_is_placed(tmp_path, where):
    recipe = tmp_path / "bad.toml"
    recipe.write_text(TINY_RECIPE.replace('name = "multi_similarity"', 'name = "nope"'))
    args = ["--debug", "validate", recipe] if where == "before" else ["validate", recipe, "--debug"]
    proc = run_cli(*args)
    assert proc.returncode == 2 and "Traceback" in proc.stderr, proc.stderr
    assert "unknown loss 'nope'" in proc.stderr


def test_debug_after_a_double_dash_is_left_to_the_command():
    from dmlplug.cli import split_debug

    assert split_debug(["run", "r.toml", "--debug"]) == (["run", "r.toml"], True)
    assert split_debug(["--debug", "run", "r.toml"]) == (["run", "r.toml"], True)
    assert split_debug(["run", "--", "--debug"]) == (["run", "--", "--debug"], False)
    assert split_debug(["run", "r.toml"]) == (["run", "r.toml"], False)
