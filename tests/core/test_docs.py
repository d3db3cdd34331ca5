"""Docs that are generated or quoted must match the code."""

import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_hook_is_documented_with_an_example():
    from dmlplug import hookspecs

    hooks = [f for _, f in inspect.getmembers(hookspecs, inspect.isfunction) if hasattr(f, "dmlplug_spec")]
    assert len(hooks) == 28  # a new hook also needs its test in tests/hooks (test_every_hook_tested.py)
    assert "register(name, factory" in (hookspecs.__doc__ or "")  # the one argument of every register_<kind>
    for func in hooks:
        doc = func.__doc__ or ""
        # register_<kind> hooks take only the Register callback, documented once in the module docstring.
        registration = list(inspect.signature(func).parameters) == ["register"]
        assert ("Args:" in doc or registration) and "Example::" in doc, (
            f"{func.__name__} lacks Args/Example in its docstring")


GENERATED = [("generate_hooks", "hooks.md"), ("generate_recipes", "recipes.md")]


@pytest.mark.parametrize(("generator", "document"), GENERATED)
def test_generated_reference_is_fresh(generator, document):
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        module = importlib.import_module(generator)
    finally:
        sys.path.pop(0)
    assert (ROOT / "docs" / document).read_text() == module.render(), (
        f"docs/{document} is stale: run `python docs/{generator}.py`")


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    test_command = next(b.strip() for b in blocks if "pytest" in b)
    assert test_command in ci


def test_readme_install_command_runs_the_quickstart():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    assert any("pip install" in b and "dmlplug run recipes/quickstart.toml" in b for b in blocks)


def test_readme_tour_shows_the_quickstart_recipe():
    """The recipe of the README's "A short tour" is recipes/quickstart.toml: every key and value (comments aside)."""
    import tomllib

    tour = (ROOT / "README.md").read_text().split("## A short tour", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```toml\n(.*?)```", tour, flags=re.S)
    assert block is not None, "the README's tour shows no TOML recipe"
    assert block.group(1).startswith("# recipes/quickstart.toml\n")
    quickstart = tomllib.loads((ROOT / "recipes" / "quickstart.toml").read_text())
    assert tomllib.loads(block.group(1)) == quickstart, (
        "README.md's tour recipe and recipes/quickstart.toml differ: copy the recipe into the README")


def test_all_packages_on_disk_are_packaged():
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = set()
    for top, logical in (("dmlplug", "dmlplug"), ("plugins", "dmlplug_builtins")):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            on_disk.add(".".join([logical, *rel.parts]))
    assert on_disk <= listed, f"add to pyproject [tool.setuptools] packages: {sorted(on_disk - listed)}"


def test_cli_help_lists_core_commands():
    out = subprocess.run([sys.executable, "-m", "dmlplug", "--help"], capture_output=True, text=True, check=True)
    for command in ("run", "validate", "plugins", "list"):
        assert command in out.stdout


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def _dmlplug(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "dmlplug", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


def test_cli_help_lists_monitoring_and_plugin_commands():
    out = subprocess.run([sys.executable, "-m", "dmlplug", "--help"], capture_output=True, text=True, check=True)
    for command in ("report", "doctor", "plugin"):
        assert command in out.stdout
    sub = subprocess.run([sys.executable, "-m", "dmlplug", "plugin", "--help"], capture_output=True, text=True,
                         check=True)
    assert "new" in sub.stdout


def test_readme_monitoring_commands_run():
    """The README's block of quick commands runs as written (the install/test lines are what CI runs)."""
    readme = (ROOT / "README.md").read_text()
    block = next(b for b in _bash_blocks(readme) if "dmlplug doctor" in b)
    for line in block.strip().splitlines():
        args = line.split()
        assert args[0] == "dmlplug", f"README command not covered by this test: {line}"
        proc = _dmlplug(args[1:], cwd=ROOT)
        assert proc.returncode == 0, f"{line}\n{proc.stdout}\n{proc.stderr}"


@pytest.mark.slow
def test_tutorial_commands_run(tmp_path):
    """docs/tutorial-first-loss-plugin.md: every bash command, in order, in a fresh folder.

    `pip install -e DIR` installs into a private folder (put on PYTHONPATH) instead of the test environment, and
    the `console` block (training) is not run here: training a recipe end to end is covered by the engine tests.
    """
    text = (ROOT / "docs" / "tutorial-first-loss-plugin.md").read_text()
    recipe = next(b for b in re.findall(r"```toml\n(.*?)```", text, flags=re.S) if b.startswith("# my_recipe.toml"))
    (tmp_path / "my_recipe.toml").write_text(recipe)
    site = tmp_path / "site"
    env = {"PYTHONPATH": str(site)}
    outputs = {}
    for block in _bash_blocks(text):
        for line in block.strip().splitlines():
            args = line.split()
            if args[:3] == ["pip", "install", "-e"]:
                cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                       "--no-index", "--target", str(site), args[3]]
                proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
            elif args[:3] == ["python", "-m", "pytest"]:
                proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args[3:]],
                                      cwd=tmp_path, capture_output=True, text=True, timeout=600)
            elif args[0] == "dmlplug":
                proc = _dmlplug(args[1:], cwd=tmp_path, env=env)
            else:
                raise AssertionError(f"tutorial command not covered by this test: {line}")
            assert proc.returncode == 0, f"{line}\n{proc.stdout}\n{proc.stderr}"
            outputs[line] = proc.stdout
    assert "4 passed" in outputs["python -m pytest -q dmlplug-my-loss/tests"]
    assert re.search(r"dmlplug_my_loss\s+dmlplug-my-loss 0\.1\.0\s+register_losses", outputs["dmlplug plugins"])
    assert "my_loss_contrastive" in outputs["dmlplug list losses --params"]
    assert "neg_margin = 0.3" in outputs["dmlplug list losses --params"]
    # What the tutorial says about a typo, and the code it quotes, are true.
    (tmp_path / "typo.toml").write_text(recipe.replace("neg_margin = 0.2", "neg_margn = 0.2"))
    typo = _dmlplug(["validate", "typo.toml"], cwd=tmp_path, env=env)
    assert typo.returncode == 2 and "loss.neg_margn" in typo.stderr and "neg_margin" in typo.stderr
    module = (tmp_path / "dmlplug-my-loss" / "dmlplug_my_loss" / "__init__.py").read_text()
    quoted = re.findall(r"```python\n(.*?)```", text, flags=re.S)[0]
    for line in quoted.splitlines():
        if line.strip() and line.strip() != "...":
            assert line in module, f"the tutorial quotes a line the generated module lacks: {line!r}"


# ------------------------------------------------------------------------------------------------ every doc statement

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _code_blocks(path: Path) -> list[tuple[str, str]]:
    """(language, body) of every fenced block of a Markdown file."""
    return re.findall(r"```(\w*)\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def _doc_commands() -> list[tuple[str, list[str]]]:
    """Every `dmlplug ...` command line of the docs' shell blocks, as (where, arguments after `dmlplug`)."""
    import shlex

    found = []
    for path in DOCS:
        for lang, body in _code_blocks(path):
            if lang in ("python", "toml", "json"):
                continue
            for line in body.replace("\\\n", " ").splitlines():
                line = line.strip().removeprefix("$ ")
                words = shlex.split(line, comments=True) if "dmlplug" in line else []
                # `dmlplug ARGS`, or `python -m dmlplug ARGS` / `torchrun ... -m dmlplug ARGS`
                if words[:1] == ["dmlplug"]:
                    args = words[1:]
                elif "-m" in words and words[words.index("-m") + 1:][:1] == ["dmlplug"]:
                    args = words[words.index("-m") + 2:]
                else:
                    continue
                found.append((f"{path.relative_to(ROOT)}: {line}", args))
    return found


DOC_COMMANDS = _doc_commands()


def test_the_docs_show_commands():
    assert len(DOC_COMMANDS) >= 15, "the command extraction found fewer commands than the docs show"


@pytest.mark.parametrize("args", [c[1] for c in DOC_COMMANDS], ids=[c[0] for c in DOC_COMMANDS])
def test_every_documented_command_parses(args):
    """Each command and its options exist (`--help` appended: typer parses the options, then prints help)."""
    from typer.testing import CliRunner

    from dmlplug.cli import build_app

    result = CliRunner().invoke(build_app(), [*args, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def _merge_into_quickstart(block: dict) -> dict:
    """The quickstart recipe with a doc's TOML fragment laid over it (a named component table replaces)."""
    import copy
    import tomllib

    from dmlplug.recipe.schema import SECTION_KIND

    raw = tomllib.loads((ROOT / "recipes" / "quickstart.toml").read_text())
    merged = copy.deepcopy(raw)
    for key, value in block.items():
        if isinstance(value, dict) and key not in SECTION_KIND and isinstance(merged.get(key), dict):
            for sub, sub_value in value.items():
                replace = f"{key}.{sub}" in SECTION_KIND and isinstance(sub_value, dict) and "name" in sub_value
                if isinstance(sub_value, dict) and not replace and isinstance(merged[key].get(sub), dict):
                    merged[key][sub] = {**merged[key][sub], **sub_value}
                else:
                    merged[key][sub] = sub_value
        else:
            merged[key] = value
    if "loss" in block and "miner" not in block:
        merged.pop("miner", None)  # the quickstart's miner belongs to its loss
    return merged


#: TOML blocks that name components of a plugin the docs create (validated with the plugin installed by
#: test_tutorial_commands_run).
PLUGIN_TOML = {"docs/tutorial-first-loss-plugin.md"}
#: A block that starts with ``# <path>.space.toml`` (``.sweep.toml``) is a search space of `dmlplug tune` (a grid of
#: `dmlplug sweep`), not a recipe fragment (tests/tune/test_tune_space.py and test_sweep.py check it is the
#: shipped file, which they validate).
DOC_TOML = [(f"{p.relative_to(ROOT)}#{i}", body) for p in DOCS for i, (lang, body) in enumerate(_code_blocks(p))
            if lang == "toml" and str(p.relative_to(ROOT)) not in PLUGIN_TOML
            and not re.match(r"# \S+\.(space|sweep)\.toml\n", body)]


@pytest.mark.parametrize("body", [b for _, b in DOC_TOML], ids=[w for w, _ in DOC_TOML])
def test_every_documented_recipe_fragment_validates(body, monkeypatch, tmp_path):
    """Each TOML block of the docs, laid over the quickstart recipe, validates: its keys and values exist."""
    import tomllib

    import dmlplug

    monkeypatch.setenv("DMLPLUG_DATA", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    dmlplug.validate(_merge_into_quickstart(tomllib.loads(body)))


#: Path-like words of the docs that are not files of the repository: placeholders and files a user creates.
NOT_REPOSITORY_FILES = re.compile(r"[<>{}$]|^runs/|^sweeps/|\.(npz|pkl|json|csv|pt|png)$")
#: A repository path: a top-level folder, then a file name with an extension or a folder ending in "/"
#: ("dmlplug/PML" in a table header is no path). Globs (`tests/regularizers/test_diva_*.py`) must match a file.
REPO_PATH = re.compile(r"(?<![\w./-])((?:dmlplug|plugins|recipes|docs|tests|examples|benchmarks|\.ci)/"
                       r"(?:[\w.*-]+/)*(?:[\w*-]+(?:\.\w+)+|))(?![\w/])")  # several suffixes: x.space.toml
#: Paths of the project the tutorial generates, not of this repository.
OTHER_PROJECT = {"docs/tutorial-first-loss-plugin.md": {"tests/test_my_loss.py"}}


def test_every_repository_path_the_docs_mention_exists():
    missing = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for name in REPO_PATH.findall(text):
            if NOT_REPOSITORY_FILES.search(name) or name in OTHER_PROJECT.get(str(path.relative_to(ROOT)), ()):
                continue
            if not (any(ROOT.glob(name)) if "*" in name else (ROOT / name).exists()):
                missing.append(f"{path.relative_to(ROOT)}: {name}")
        for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" not in link and not (path.parent / link).exists():
                missing.append(f"{path.relative_to(ROOT)}: link {link}")
    assert not missing, "the docs name files that do not exist:\n" + "\n".join(missing)
