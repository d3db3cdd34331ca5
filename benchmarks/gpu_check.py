"""The prepared GPU check of issue #24: every GPU measurement in one command, each step bounded in time.

The GPU machine is lent for minutes, one command may run 10 minutes: this script runs the checks in order, each
in its own processes with its own time bound, carries on past a failed or timed-out step, and writes
``report.json`` and ``report.md`` into the folder given after every step (a killed command still leaves the
steps done so far). Nothing else goes there but the pytest step's ``pytest.log``: data, runs and the other logs
go to ``--work`` (default OUT/work; the GPU session names a folder outside OUT, which brings back few files).
``--dry-run-cpu`` runs every step at toy size on the CPU (tests/gpu/test_gpu_check.py), so the GPU session
spends its minutes measuring, not debugging this script.

Usage (the GPU session: docs/performance.md, "The prepared GPU check")::

    python benchmarks/gpu_check.py OUT --work /tmp/gc --skip pytest --budget-s 480   # all but the tests, <= 8 min
    python benchmarks/gpu_check.py OUT --work /tmp/gc --steps pytest                  # the test suite, alone
    python benchmarks/gpu_check.py OUT --dry-run-cpu                   # toy size on the CPU (CI)
    python benchmarks/gpu_check.py OUT --steps knn,faiss_gpu           # some steps only

Steps (``--list`` prints them): the step table is in ``benchmarks/gpu_steps.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TAIL_CHARS = 3000


class StepSkipped(Exception):
    """A step that cannot run here (a missing package, no GPU build): skipped, with the reason."""


class StepFailed(Exception):
    """A step whose check did not hold, or whose command failed."""


class StepTimeout(Exception):
    """A step that ran past its time bound."""


@dataclass
class Context:
    """What a step runs with: toy or GPU sizes, its folders, its deadline, and the output it collected."""

    dry: bool
    out: Path
    work: Path
    deadline: float = 0.0
    tail: list[str] = field(default_factory=list)

    @property
    def device(self) -> str:
        return "cpu" if self.dry else "cuda"

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, cmd: list[str], *, log: str | None = None, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run ``cmd`` (``python`` = this interpreter) from the repository root within the step's deadline.

        The process gets its own session so a timeout kills its children too (DataLoader workers, torchrun).
        """
        if cmd[0] == "python":
            cmd = [sys.executable, *cmd[1:]]
        budget = self.remaining()
        if budget <= 0:
            raise StepTimeout("no time left in the step's bound")
        child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 # unbuffered: a process killed at the bound still leaves what it printed
                                 env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}, start_new_session=True)
        try:
            output, _ = child.communicate(timeout=budget)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            output, _ = child.communicate()
            self._keep(cmd, output, log)
            what = cmd[2] if cmd[1:2] == ["-m"] else Path(cmd[1] if len(cmd) > 1 else cmd[0]).name
            raise StepTimeout(f"{what} ran past the step's bound") from None
        self._keep(cmd, output, log)
        if check and child.returncode != 0:
            raise StepFailed(f"exit status {child.returncode}: {' '.join(cmd[1:4])} ...")
        return subprocess.CompletedProcess(cmd, child.returncode, output, "")

    def _keep(self, cmd: list[str], output: str, log: str | None) -> None:
        self.tail.append(f"$ {' '.join(Path(c).name if i == 0 else c for i, c in enumerate(cmd))}\n{output}")
        if log:  # logs stay in the work folder: only report.json, report.md (and pytest.log) go to OUT
            (self.work / "logs").mkdir(parents=True, exist_ok=True)
            (self.work / "logs" / log).write_text(output)


def run_step(step: Any, ctx: Context, bound: float) -> dict[str, Any]:
    """Run one step within ``bound`` seconds; its record (never raises)."""
    ctx.deadline, ctx.tail = time.monotonic() + bound, []
    started = time.monotonic()
    record: dict[str, Any] = {"name": step.name, "title": step.title, "bound_s": round(bound, 1)}
    try:
        record["numbers"] = step.fn(ctx) or {}
        record["status"] = "ok"
    except (StepSkipped, StepTimeout, StepFailed) as why:
        record["status"] = {StepSkipped: "skipped", StepTimeout: "timeout", StepFailed: "failed"}[type(why)]
        record["reason"] = str(why)
        record["numbers"] = getattr(why, "numbers", {})  # what finished before the failure or the timeout
    except Exception as error:  # noqa: BLE001 - a step's bug is that step's failure, the next steps still run
        record["status"], record["reason"] = "failed", f"{type(error).__name__}: {error}"
    record["seconds"] = round(time.monotonic() - started, 2)
    record["output_tail"] = "\n".join(ctx.tail)[-TAIL_CHARS:]
    return record


def write_report(out: Path, header: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """report.json (everything) and report.md (a table, then each step's numbers and output tail)."""
    from dmlplug.files import write_text

    write_text(out / "report.json", json.dumps({**header, "steps": records}, indent=1, default=str))
    lines = [f"# GPU check ({header['mode']})", "", f"Started {header['started']}, device: {header['device']}; "
             f"budget {header['budget_s']} s.", "", "| step | status | seconds | bound | key numbers |",
             "|---|---|---|---|---|"]
    for r in records:
        key = r.get("reason") or ", ".join(f"{k}={v}" for k, v in r.get("numbers", {}).items()
                                           if not isinstance(v, dict | list))
        lines.append(f"| {r['name']} | {r['status']} | {r.get('seconds', 0)} | {r['bound_s']} | {key[:300]} |")
    for r in records:
        lines += ["", f"## {r['name']}: {r['title']}", "", f"status **{r['status']}**"
                  + (f": {r['reason']}" if r.get("reason") else ""), "", "```json",
                  json.dumps(r.get("numbers", {}), indent=1, default=str)[:4000], "```"]
        if r.get("output_tail"):
            lines += ["", "<details><summary>output tail</summary>", "", "```", r["output_tail"], "```", "",
                      "</details>"]
    write_text(out / "report.md", "\n".join(lines) + "\n")


def _device_name(dry: bool) -> str:
    if dry:
        return "cpu (dry run)"
    import torch

    if not torch.cuda.is_available():
        sys.exit("gpu_check: torch.cuda.is_available() is False: run it on the GPU machine, or use --dry-run-cpu "
                 "for the toy-size CPU run")
    return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"


def main(argv: list[str] | None = None) -> int:
    from gpu_steps import STEPS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, nargs="?", help="report folder (created): report.json, report.md")
    parser.add_argument("--dry-run-cpu", action="store_true", help="every step at toy size on the CPU")
    parser.add_argument("--steps", help="comma-separated steps to run (default: all)")
    parser.add_argument("--skip", default="", help="comma-separated steps not to run")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="wall-clock seconds for all steps; a step gets at most what is left, and a step "
                        "with less than 10 s left is skipped (default: the sum of the bounds)")
    parser.add_argument("--bound-scale", type=float, default=1.0,
                        help="multiply every step's bound (a slower or busier machine than the bounds assume)")
    parser.add_argument("--work", type=Path, help="scratch folder for data and runs (default: OUT/work)")
    parser.add_argument("--list", action="store_true", help="print the steps and their bounds, then exit")
    args = parser.parse_args(argv)
    if args.list:
        for step in STEPS:
            print(f"{step.name:14s} {step.bound_s:5.0f} s (dry {step.dry_bound_s:3.0f} s)  {step.title}")
        return 0
    if args.out is None:
        parser.error("the report folder OUT is required")
    names = [s.name for s in STEPS]
    chosen = args.steps.split(",") if args.steps else names
    unknown = sorted(set(chosen + [s for s in args.skip.split(",") if s]) - set(names))
    if unknown:
        parser.error(f"unknown steps {unknown}; the steps are {', '.join(names)}")
    steps = [s for s in STEPS if s.name in chosen and s.name not in args.skip.split(",")]
    if args.dry_run_cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # toy size on the CPU, also on a GPU machine
    args.out.mkdir(parents=True, exist_ok=True)
    ctx = Context(dry=args.dry_run_cpu, out=args.out, work=args.work or args.out / "work")
    ctx.work.mkdir(parents=True, exist_ok=True)
    bounds = [(s.dry_bound_s if ctx.dry else s.bound_s) * args.bound_scale for s in steps]
    budget = args.budget_s if args.budget_s is not None else sum(bounds)
    header = {"mode": "dry-run-cpu" if ctx.dry else "gpu", "device": _device_name(ctx.dry), "budget_s": budget,
              "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": sys.argv}
    began, records = time.monotonic(), []
    for step, bound in zip(steps, bounds, strict=True):
        left = budget - (time.monotonic() - began)
        if left < 10:
            records.append({"name": step.name, "title": step.title, "bound_s": bound, "status": "skipped",
                            "reason": f"the budget of {budget:g} s is spent ({left:.0f} s left)", "seconds": 0})
        else:
            print(f"[gpu_check] {step.name} (bound {min(bound, left):.0f} s) ...", flush=True)
            records.append(run_step(step, ctx, min(bound, left)))
            print(f"[gpu_check] {step.name}: {records[-1]['status']} in {records[-1]['seconds']} s "
                  + (records[-1].get("reason") or ""), flush=True)
        write_report(args.out, header, records)
    statuses = [r["status"] for r in records]
    print(f"[gpu_check] {statuses.count('ok')} ok, {statuses.count('failed')} failed, "
          f"{statuses.count('timeout')} timed out, {statuses.count('skipped')} skipped; report: {args.out}/report.md")
    return 1 if {"failed", "timeout"} & set(statuses) else 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    import gpu_check  # one module object: gpu_steps raises gpu_check's exception classes, not __main__'s

    sys.exit(gpu_check.main())
