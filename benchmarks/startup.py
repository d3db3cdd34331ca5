"""Start-up cost of dmlplug against the floor a user would compare it with, each in a fresh process.

Every figure is a whole fresh interpreter (``subprocess.run``), so it includes what a user waits for: Python's own
start-up, the imports and the work. The cases, and the floor each is compared with:

- ``import dmlplug`` against ``import pluggy; from pydantic import BaseModel, Field``: the facade exposes a pydantic
  model base (``Params``) and a pluggy marker (``hookimpl``), so these imports are the least it can cost;
- host load, ``dmlplug.plugins.get_host()`` (every command and the first ``dmlplug.evaluate`` pay it): timed inside
  the process around the call alone (the imports before it are the row above), against the 50 ms target of
  issue #38;
- ``dmlplug --help`` against a bare typer application with a root callback and one command printing its
  ``--help`` (typer renders help with rich, which the floor imports too);
- ``dmlplug validate recipes/quickstart.toml`` against a bare typer command that reads the same TOML file with
  tomllib and validates it with a small pydantic model (what a hand-written validator costs at the least).

The floors are written out below and import nothing of dmlplug. The cases run in rounds, every case once per
round, in an order that rotates each round so that a slow phase of a shared machine hits all of them; the
medians of wall time and of the child's CPU time (user + system, steadier on a loaded machine) are printed, in ms,
with the ratio to the floor. A first round is a warm-up (it also writes the bytecode caches an installed package
ships with: ``PYTHONDONTWRITEBYTECODE`` is dropped from the children's environment).

``--importtime`` then runs each command once more under ``python -X importtime`` and prints its imports with the
largest cumulative and self times (the evidence of where start-up goes; the host imports the built-in plugins with
the import statement's machinery so that they show). Modules imported with ``importlib.import_module`` (third-party
entry points) are not timed by the interpreter; their own imports still show. Registration work (the
``register_<kind>`` calls) is no import: profile it with ``python -c "import cProfile, dmlplug.plugins as p;
cProfile.run('p.get_host()', sort='cumtime')"``.

Example::

    python benchmarks/startup.py                    # 15 rounds
    python benchmarks/startup.py --rounds 5 --importtime
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPE = "recipes/quickstart.toml"
HOST_TARGET_MS = 50.0

#: The host load, timed in the child around the call alone; it prints the wall and CPU milliseconds.
HOST_CODE = """\
import time
import dmlplug.plugins
start, cpu = time.perf_counter(), time.process_time()
dmlplug.plugins.get_host()
print(f"HOST_MS {(time.perf_counter() - start) * 1000:.3f} {(time.process_time() - cpu) * 1000:.3f}")
"""

FLOOR_IMPORT = "import pluggy\nfrom pydantic import BaseModel, Field"

#: A bare typer application: a root callback and one command, as small as a typer CLI gets.
FLOOR_HELP = """\
import typer
app = typer.Typer(add_completion=False, no_args_is_help=True, help="Bare.")
@app.callback()
def root(debug: bool = typer.Option(False, "--debug", help="Tracebacks.")) -> None:
    \"\"\"Bare application.\"\"\"
@app.command("validate")
def validate(recipe: str) -> None:
    \"\"\"Validate a recipe.\"\"\"
app(prog_name="bare")
"""

#: The same application whose command reads the recipe with tomllib and validates it with pydantic.
FLOOR_VALIDATE = """\
import tomllib
from typing import Any
import typer
from pydantic import BaseModel, ConfigDict, Field
class Section(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field("", description="Component name.")
class Recipe(BaseModel):
    model_config = ConfigDict(extra="allow")
    run: dict[str, Any] = Field(default_factory=dict)
    data: dict[str, Any] = Field(default_factory=dict)
    loss: Section = Field(default_factory=Section)
    backbone: Section = Field(default_factory=Section)
app = typer.Typer(add_completion=False, no_args_is_help=True, help="Bare.")
@app.callback()
def root() -> None:
    \"\"\"Bare application.\"\"\"
@app.command("validate")
def validate(recipe: str) -> None:
    \"\"\"Validate a recipe.\"\"\"
    with open(recipe, "rb") as f:
        Recipe.model_validate(tomllib.load(f))
    print("ok")
app(prog_name="bare")
"""


@dataclass
class Case:
    """One command line, timed in fresh processes."""

    name: str
    argv: list[str]
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    inner: list[float] = field(default_factory=list)  # HOST_MS printed by the child (wall), when it prints one
    inner_cpu: list[float] = field(default_factory=list)  # and its CPU time

    def run(self, env: dict[str, str], *, record: bool = True) -> None:
        """Run the command once; record its wall and CPU milliseconds."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(self.argv, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"{self.name} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        if record:
            self.wall.append(wall * 1000)
            self.cpu.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
            match = re.search(r"HOST_MS ([0-9.]+) ([0-9.]+)", done.stdout)
            if match:
                self.inner.append(float(match.group(1)))
                self.inner_cpu.append(float(match.group(2)))


def cases() -> dict[str, Case]:
    """The timed command lines: dmlplug's and their floors."""
    py = sys.executable
    dml = [py, "-m", "dmlplug"]
    return {case.name: case for case in (
        Case("python -c pass", [py, "-c", "pass"]),
        Case("floor: pluggy + pydantic", [py, "-c", FLOOR_IMPORT]),
        Case("import dmlplug", [py, "-c", "import dmlplug"]),
        Case("host load", [py, "-c", HOST_CODE]),
        Case("floor: bare typer --help", [py, "-c", FLOOR_HELP, "--help"]),
        Case("dmlplug --help", [*dml, "--help"]),
        Case("floor: bare typer validate", [py, "-c", FLOOR_VALIDATE, "validate", RECIPE]),
        Case("dmlplug validate", [*dml, "validate", RECIPE]),
    )}


#: (case, its floor) for the ratios.
PAIRS = (("import dmlplug", "floor: pluggy + pydantic"), ("dmlplug --help", "floor: bare typer --help"),
         ("dmlplug validate", "floor: bare typer validate"))


def measure(rounds: int, env: dict[str, str]) -> dict[str, Case]:
    """Warm up, then ``rounds`` rounds of every case, the order rotated each round."""
    timed = cases()
    order = list(timed.values())
    for case in order:
        case.run(env, record=False)
    for r in range(rounds):
        shift = r % len(order)
        for case in order[shift:] + order[:shift]:
            case.run(env)
    return timed


def report(timed: dict[str, Case]) -> None:
    """Print medians (wall and CPU ms) and the ratios to the floors."""
    med = statistics.median
    print(f"{'case':32} {'wall ms':>9} {'cpu ms':>9}   (medians of {len(timed['host load'].wall)} fresh processes)")
    for case in timed.values():
        print(f"{case.name:32} {med(case.wall):9.1f} {med(case.cpu):9.1f}")
    host = timed["host load"]
    print(f"\nhost load, get_host() alone in the child: {med(host.inner):.1f} ms wall median "
          f"(min {min(host.inner):.1f}, max {max(host.inner):.1f}), {med(host.inner_cpu):.1f} ms CPU; "
          f"target <= {HOST_TARGET_MS:.0f} ms: {'met' if med(host.inner) <= HOST_TARGET_MS else 'NOT met'} "
          "(wall; on a loaded machine read the CPU figure)")
    base = timed["python -c pass"]
    print(f"python -c pass: {med(base.wall):.1f} ms wall (interpreter start-up, in every row)\n")
    print(f"{'ratio to its floor':32} {'wall':>9} {'cpu':>9} {'extra wall ms':>14}")
    for name, floor in PAIRS:
        case, ref = timed[name], timed[floor]
        print(f"{name:32} {med(case.wall) / med(ref.wall):8.2f}x {med(case.cpu) / med(ref.cpu):8.2f}x "
              f"{med(case.wall) - med(ref.wall):14.1f}")


def importtime(timed: dict[str, Case], env: dict[str, str], top: int) -> None:
    """Run each dmlplug command under ``-X importtime``; print its costliest imports, cumulative and self."""
    for name in ("import dmlplug", "host load", "dmlplug --help", "dmlplug validate"):
        argv = timed[name].argv
        done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], cwd=ROOT, env=env, capture_output=True,
                              text=True, check=True)
        rows = []  # (cumulative µs, depth, module, self µs)
        for line in done.stderr.splitlines():
            match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
            if match:
                rows.append((int(match.group(2)), len(match.group(3)) // 2, match.group(4), int(match.group(1))))
        total = sum(cumulative for cumulative, depth, _, _ in rows if depth == 0)
        print(f"\n-X importtime: {name}: {total / 1000:.1f} ms in imports ({len(rows)} modules; the rest of the "
              "process is interpreter start-up and the command's own work)")
        print(f"  {'cumulative ms':>13} {'self ms':>8}  imported at the top or one level down")
        for cumulative, depth, module, own in sorted((r for r in rows if r[1] <= 1), reverse=True)[:top]:
            print(f"  {cumulative / 1000:13.1f} {own / 1000:8.1f}  {'  ' * depth}{module}")
        print(f"  {'self ms':>13}           the largest self times")
        for _, _, module, own in sorted(rows, key=lambda r: -r[3])[:top]:
            print(f"  {own / 1000:13.1f}           {module}")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="Rounds (every case once per round).")
    parser.add_argument("--importtime", action="store_true", help="Also print -X importtime evidence.")
    parser.add_argument("--top", type=int, default=20, help="Imports listed per command with --importtime.")
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    timed = measure(args.rounds, env)
    report(timed)
    if args.importtime:
        importtime(timed, env, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
