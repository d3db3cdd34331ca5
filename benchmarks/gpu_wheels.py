"""The offline install for the GPU machine: the wheels dmlplug needs there, fetched here, checked against pip.

The GPU machine (issue #24) has Python 3.12 with torch 2.11 (CUDA 13) and torch's own dependencies, no network,
and receives at most 64 MiB of files per command (the repository included). ``benchmarks/gpu_wheels.txt`` lists,
as exact ``name==version`` lines, what dmlplug's pinned set (``constraints.txt``) needs there on top of what the
machine has (``GPU_HAS``), with ``torchvision`` at the release built for torch 2.11 (``GPU_PINS``).

Subcommands (both need the network, so they are developer commands, not CI tests)::

    python benchmarks/gpu_wheels.py download .whl       # fetch the cp312 manylinux wheels, print sizes, fail > 64 MiB
    python benchmarks/gpu_wheels.py download .whl --skip-image   # only those the GPU image lacks (what travels)
    python benchmarks/gpu_wheels.py check               # resolve the pinned set with pip for that machine and
                                                        # fail if the list misses or mis-versions anything

``check`` runs ``pip install --dry-run --report`` twice for Python 3.12 on manylinux x86-64 (binary wheels only):
once for ``GPU_HAS`` (what the machine is assumed to hold: its versions replace the pins of those packages), once
for dmlplug's dependencies and the extras in ``EXTRAS`` under the adjusted constraints. What the second resolution
installs beyond the first is what the list must hold, version for version. The comparison itself
(:func:`compare`) is tested offline against a recorded resolution (tests/gpu/test_gpu_wheels.py).

On the GPU machine (README.md, "Installing offline on the GPU machine")::

    pip install --no-index --find-links .whl --no-deps -r .whl/requirements.txt
    pip install --no-deps --no-build-isolation -e .
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "benchmarks" / "gpu_wheels.txt"
IMAGE = ROOT / "benchmarks" / "gpu_image.txt"
CONSTRAINTS = ROOT / "constraints.txt"

#: What the GPU machine is assumed to hold (with everything these depend on): torch's own dependencies come
#: with it, numpy is in every torch image. Their versions there replace the pins of constraints.txt.
GPU_HAS = ("torch==2.11.0", "numpy")
#: Pins that must differ from constraints.txt because the machine's torch differs: the torchvision built for it.
GPU_PINS = {"torchvision": "0.26.0"}
#: dmlplug's extras the list covers besides its dependencies, and single packages of other extras: ONNX export
#: (the bundle tests and `dmlplug export`) and pytest (the test-suite step of benchmarks/gpu_check.py).
EXTRAS = ("export",)
EXTRA_PACKAGES = ("pytest",)
#: Pure-Python packages published as source only (no wheel for ``--only-binary``): ``download`` builds their
#: wheel here and checks that its requirements are these; ``check`` resolves these requirements in their place.
SDIST_ONLY = {"nflows": ("matplotlib", "numpy", "tensorboard", "torch", "tqdm")}
#: What one command may carry to the GPU machine, the repository included (issue #24).
LIMIT_MIB = 64.0
PYTHON_VERSION = "3.12"
#: manylinux tags pip matches exactly, so every glibc level up to the machine's is named (its Python 3.12.3 is
#: Ubuntu 24.04's: glibc 2.39, assumed).
PLATFORMS = ["manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64",
             *(f"manylinux_2_{n}_x86_64" for n in range(5, 40))]


def canonical(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pins(text: str) -> dict[str, str]:
    """``{canonical name: version}`` of the ``name==version`` lines of a list or constraints file.

    Raises:
        ValueError: A line that is not an exact pin, or a name pinned twice.
    """
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not version.strip() or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name.strip()):
            raise ValueError(f"line {number}: {raw!r} is not a 'name==version' pin")
        key = canonical(name.strip())
        if key in pins:
            raise ValueError(f"line {number}: {name.strip()} is pinned twice (two versions stop the whole install)")
        pins[key] = version.strip()
    return pins


def report_pins(report: dict) -> dict[str, str]:
    """``{canonical name: version}`` of what a ``pip install --report`` JSON would install."""
    return {canonical(item["metadata"]["name"]): item["metadata"]["version"] for item in report["install"]}


def gpu_constraints(constraints: dict[str, str], has: dict[str, str], pins: dict[str, str]) -> dict[str, str]:
    """constraints.txt adjusted to the GPU machine: its packages at its versions, ``pins`` over both."""
    adjusted = {name: version for name, version in constraints.items() if name not in has}
    adjusted.update(has)
    adjusted.update({canonical(name): version for name, version in pins.items()})
    return adjusted


def compare(listed: dict[str, str], resolved: dict[str, str], has: dict[str, str]) -> list[str]:
    """Every way the list differs from what the machine needs: missing, wrong version, superfluous, clashing.

    Args:
        listed: The list's pins.
        resolved: What pip resolves for dmlplug on the machine (its own packages included).
        has: What the machine holds.
    """
    needed = {name: version for name, version in resolved.items() if name not in has}
    problems = [f"missing: {name}=={version}" for name, version in sorted(needed.items()) if name not in listed]
    problems += [f"wrong version: {name}=={listed[name]} listed, {version} needed"
                 for name, version in sorted(needed.items()) if name in listed and listed[name] != version]
    problems += [f"not needed: {name}=={version} (the machine has it, or nothing requires it)"
                 for name, version in sorted(listed.items()) if name not in needed]
    problems += [f"clash: the machine has {name} {has[name]}, the pinned set resolved {resolved[name]}"
                 for name in sorted(set(has) & set(resolved)) if has[name] != resolved[name]]
    return problems


def requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """dmlplug's dependencies, the extras in ``EXTRAS`` and ``EXTRA_PACKAGES``, as pip requirement strings."""
    project = tomllib.loads(pyproject.read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in EXTRAS:
        reqs += project["optional-dependencies"][extra]
    dev = {_requirement_name(r): r for r in project["optional-dependencies"]["dev"]}
    reqs += [dev[canonical(name)] for name in EXTRA_PACKAGES]
    return reqs


def _requirement_name(requirement: str) -> str:
    return canonical(re.split(r"[<>=!~ \[;]", requirement, maxsplit=1)[0])


def binary_requirements(reqs: list[str]) -> list[str]:
    """``reqs`` with each source-only package replaced by its own requirements (pip resolves wheels only)."""
    out = [r for r in reqs if _requirement_name(r) not in SDIST_ONLY]
    for r in reqs:
        out += SDIST_ONLY.get(_requirement_name(r), ())
    return out


def _target_options() -> list[str]:
    options = ["--only-binary", ":all:", "--python-version", PYTHON_VERSION, "--implementation", "cp"]
    for platform in PLATFORMS:
        options += ["--platform", platform]
    return options


def _resolve(reqs: list[str], constraints: dict[str, str] | None, work: Path) -> dict[str, str]:
    """What pip would install for ``reqs`` on the GPU machine (a dry run; only metadata is fetched)."""
    report = work / "report.json"
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
           "--target", str(work / "target"), "--report", str(report), *_target_options()]
    if constraints is not None:
        file = work / "constraints.txt"
        file.write_text("".join(f"{name}=={version}\n" for name, version in sorted(constraints.items())))
        cmd += ["-c", str(file)]
    done = subprocess.run([*cmd, *reqs], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"gpu_wheels: pip could not resolve {' '.join(reqs)}:\n{done.stderr.strip()}")
    return report_pins(json.loads(report.read_text()))


def cmd_check(args: argparse.Namespace) -> int:
    listed = parse_pins(Path(args.list).read_text())
    with tempfile.TemporaryDirectory() as tmp:
        has = _resolve(list(GPU_HAS), None, Path(tmp))
        constraints = gpu_constraints(parse_pins(CONSTRAINTS.read_text()), has, GPU_PINS)
        resolved = _resolve(binary_requirements(requirements()), constraints, Path(tmp))
    # The source-only packages at their pins (their requirements are in ``resolved`` already).
    resolved.update({name: constraints[name] for name in SDIST_ONLY})
    if args.save_report:
        Path(args.save_report).write_text(json.dumps({"has": has, "resolved": resolved}, indent=1, sort_keys=True))
    problems = compare(listed, resolved, has)
    print(f"the GPU machine is assumed to hold {len(has)} packages ({', '.join(GPU_HAS)} and their dependencies); "
          f"dmlplug resolves to {len(resolved)}, of which {len(resolved) - len(set(resolved) & set(has))} "
          f"must be carried; the list has {len(listed)}")
    for problem in problems:
        print("  " + problem)
    print("check: " + ("FAILED" if problems else "the list is complete and exact"))
    return 1 if problems else 0


def wheel_sizes(folder: Path, listed: dict[str, str]) -> tuple[dict[str, int], list[str]]:
    """The size of each listed package's wheel in ``folder``, and the listed packages without one."""
    sizes: dict[str, int] = {}
    for wheel in folder.glob("*.whl"):
        name, version = wheel.name.split("-")[:2]
        if listed.get(canonical(name)) == version:
            sizes[canonical(name)] = wheel.stat().st_size
    return sizes, sorted(set(listed) - set(sizes))


def _wheel_requirements(folder: Path, name: str, version: str) -> list[str]:
    """The unconditional ``Requires-Dist`` lines of a built wheel."""
    import zipfile

    wheel = next(w for w in folder.glob("*.whl") if canonical(w.name.split("-")[0]) == name
                 and w.name.split("-")[1] == version)
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(meta).decode().splitlines()
    return [line.split(":", 1)[1].strip() for line in lines
            if line.startswith("Requires-Dist:") and "extra ==" not in line]


def image_names(text: str) -> set[str]:
    """The canonical names of ``gpu_image.txt`` (one package name a line, ``#`` comments)."""
    return {canonical(line.split("#", 1)[0].strip()) for line in text.splitlines() if line.split("#", 1)[0].strip()}


def carried(listed: dict[str, str], image: set[str]) -> dict[str, str]:
    """The pins of the list that the GPU image does not hold: what must travel."""
    return {name: version for name, version in listed.items() if name not in image}


def cmd_download(args: argparse.Namespace) -> int:
    full = parse_pins(Path(args.list).read_text())
    listed = carried(full, image_names(IMAGE.read_text())) if args.skip_image else full
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    binary = {name: version for name, version in listed.items() if name not in SDIST_ONLY}
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(folder), *_target_options(),
           *(f"{name}=={version}" for name, version in sorted(binary.items()))]
    if subprocess.run(cmd).returncode != 0:
        return 1
    for name in sorted(set(listed) & set(SDIST_ONLY)):
        # Pure Python: the wheel built here is the one the machine would build (it cannot: no network, no sdist).
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(folder),
               f"{name}=={listed[name]}"]
        if subprocess.run(cmd).returncode != 0:
            return 1
        declared = sorted(_requirement_name(r) for r in _wheel_requirements(folder, name, listed[name]))
        if declared != sorted(SDIST_ONLY[name]):
            print(f"download: {name}'s wheel requires {declared}, SDIST_ONLY says {sorted(SDIST_ONLY[name])}: "
                  "update SDIST_ONLY in benchmarks/gpu_wheels.py")
            return 1
    sizes, absent = wheel_sizes(folder, listed)
    total = sum(sizes.values())
    for name, size in sorted(sizes.items(), key=lambda item: -item[1]):
        print(f"  {size / 2**20:7.2f} MiB  {name}=={listed[name]}")
    print(f"total: {total / 2**20:.2f} MiB in {len(sizes)} wheels (limit {args.limit_mib:g} MiB, repository "
          "included, when carried to the GPU machine)")
    if absent:
        print(f"no wheel found for: {', '.join(absent)}")
        return 1
    # What the machine installs: exactly these wheels (`pip install --no-index --find-links DIR --no-deps -r`).
    (folder / "requirements.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(listed.items())))
    if not args.skip_image:
        rest = carried(listed, image_names(IMAGE.read_text()))
        print(f"without the packages the GPU image holds (--skip-image, benchmarks/gpu_image.txt): "
              f"{sum(sizes[n] for n in rest) / 2**20:.2f} MiB in {len(rest)} wheels")
    if total > args.limit_mib * 2**20:
        print(f"download: FAILED, {total / 2**20:.2f} MiB is over {args.limit_mib:g} MiB")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", default=str(LIST), help="the wheel list (default: benchmarks/gpu_wheels.txt)")
    sub = parser.add_subparsers(dest="command", required=True)
    download = sub.add_parser("download", help="fetch the listed wheels into DIR and report their total size")
    download.add_argument("dir")
    download.add_argument("--limit-mib", type=float, default=LIMIT_MIB)
    download.add_argument("--skip-image", action="store_true",
                          help="leave out the packages the GPU image holds (benchmarks/gpu_image.txt)")
    check = sub.add_parser("check", help="compare the list with pip's resolution for the GPU machine")
    check.add_argument("--save-report", help="write the two resolutions as JSON (to record a test fixture)")
    args = parser.parse_args(argv)
    return cmd_download(args) if args.command == "download" else cmd_check(args)


if __name__ == "__main__":
    sys.exit(main())
