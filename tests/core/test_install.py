"""Installable like a library: ranges in pyproject.toml, the exact tested set in constraints.txt, used by CI."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["dev"]]]


def test_readme_install_and_test_commands_use_the_constraints():
    readme = (ROOT / "README.md").read_text()
    commands = [line for line in readme.splitlines() if "pip install" in line and ".venv" in line]
    assert len(commands) == 2, commands  # the two set-up commands
    assert all("-c constraints.txt" in c for c in commands)
    assert "-c constraints.txt" in (ROOT / ".ci" / "run").read_text()


def test_every_dependency_is_a_range_and_pinned_inside_it():
    pins = _constraints()
    for req in _requirements():
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert not any(s.operator == "==" for s in req.specifier), f"{req}: a library states ranges, not pins"
        assert name in pins, f"{req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req.name}=={pins[name]} is outside {req}"


def test_pml_has_an_upper_bound_below_the_unsupported_major():
    pml = next(r for r in _requirements() if r.name == "pytorch-metric-learning")
    assert not pml.specifier.contains("3.0.0") and pml.specifier.contains("2.9.0")


def test_the_installed_environment_is_the_constrained_one():
    pins = _constraints()
    for name in ("torch", "torchvision", "pytorch-metric-learning", "timm", "faiss-cpu"):
        # As pip applies the pin: `==2.14.1` also matches the CPU build `2.14.1+cpu` (docs/install.md).
        installed = metadata.version(name)
        assert SpecifierSet(f"=={pins[name]}").contains(installed), f"{name}: installed {installed}, pin {pins[name]}"


def test_the_cpu_only_route_installs_builds_the_pins_accept():
    """docs/install.md: CPU torch and torchvision first (their versions read from constraints.txt), then the
    README's command with the constraints, which must keep them: a pin without a local label accepts `+cpu`."""
    pins = _constraints()
    doc = (ROOT / "docs" / "install.md").read_text()
    first = "--index-url https://download.pytorch.org/whl/cpu $(grep -E '^(torch|torchvision)==' constraints.txt)"
    assert first in doc
    assert '.venv/bin/pip install -c constraints.txt -e ".[dev]"' in doc
    for name in ("torch", "torchvision"):
        assert SpecifierSet(f"=={pins[name]}").contains(f"{pins[name]}+cpu")
        assert not SpecifierSet(f"=={pins[name]}+cu130").contains(f"{pins[name]}+cpu")  # a labelled pin would not
    requirements = {r.name: r for r in _requirements()}
    assert requirements["torch"].specifier.contains(f"{pins['torch']}+cpu")


def test_the_version_is_written_once_in_pyproject_and_read_from_the_metadata_everywhere():
    import dmlplug
    from dmlplug.plugins import get_host

    written = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert dmlplug.__version__ == metadata.version("dmlplug") == written
    # The built-in plugins are listed with it too (`dmlplug plugins`).
    assert {r.version for r in get_host().records.values() if r.builtin} == {written}
