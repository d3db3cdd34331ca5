"""The repository is self-contained: no tracked file points at a reference or a path users do not have.

Docstrings, component descriptions, recipe comments and docs cite the papers (author, year, title) or the
project's own ``docs/methods/*.md`` pages. A mention of the maintainers' private method notes ("METHODS",
``METHODS.md``) or of a machine-specific path (``/work/...``, ``../shared/...``, a home folder) fails here.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

#: What must not appear: the private reference, and paths of one machine or of folders beside the checkout.
FORBIDDEN = {
    # A citation (METHODS.md, "METHODS §8.2", "METHODS 8.2", "METHODS:"), not a constant named METHODS.
    "the private method notes (cite the paper or docs/methods/*.md)": re.compile(
        r"\bMETHODS(?:\.md\b|\s*§|\s+\d|\s*:(?!=)|/)"),
    "a machine-specific path": re.compile(r"(?<![\w.])/(?:work|home|Users|root)/\w"),
    "a folder outside the repository": re.compile(r"\.\./shared\b|\bshared/(?:METHODS|data)\b"),
}

#: Files allowed to name a folder outside the repository, with the reason. The test fails when an entry no longer
#: needs to be here, so the list cannot keep stale exemptions.
EXEMPT = {
    # Third-party data (the ooDML authors' published file), not copied into the project; CI checks the repository out
    # with that folder beside it, so the test reads it there as a real artifact.
    "tests/oodml/test_oodml_splitfile.py": "reads the published ooDML CARS196 split pickle from ../shared/data/oodml",
}


def _tracked() -> list[str]:
    try:
        # Untracked (not ignored) files count too: they are tracked once committed.
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [name for name in out.decode().split("\0") if name]


def _problems(text: str) -> list[str]:
    return [what for what, pattern in FORBIDDEN.items() if pattern.search(text)]


def test_no_tracked_file_mentions_a_private_reference_or_an_outside_path():
    found = {}
    for name in _tracked():
        if name == THIS:
            continue  # the rule itself names what it forbids
        path = ROOT / name
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary files, and files deleted in the working tree
        problems = _problems(text)
        if problems and name not in EXEMPT:
            found[name] = problems
    assert not found, "cite papers or docs/methods/*.md, use paths inside the repository:\n" + "\n".join(
        f"  {name}: {', '.join(what)}" for name, what in sorted(found.items()))


def test_exempt_entries_still_need_their_exemption():
    for name in EXEMPT:
        path = ROOT / name
        assert path.is_file() and _problems(path.read_text(encoding="utf-8")), (
            f"{name} is clean now: remove it from EXEMPT")


@pytest.mark.parametrize("text", [
    "see METHODS §8.2", "`shared/METHODS.md` §2", "(METHODS 8.5)", "(METHODS: disabled)", "METHODS/PML",
    "/work/venv/bin/python", "../shared/data/oodml",
    "/home/me/data",
])
def test_the_rule_recognises_each_kind_of_mention(text):
    assert _problems(text)


@pytest.mark.parametrize("text", ["docs/methods/revisiting.md", "Roth et al. 2020", "${DMLPLUG_DATA}/cub",
                                  "runs/quickstart", "dmlplug/recipe/schema.py", "METHODS = {", "list(METHODS)"])
def test_the_rule_accepts_citations_and_repository_paths(text):
    assert not _problems(text)
