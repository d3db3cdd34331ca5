"""A fold run as a multi-process torchrun job (``dmlplug tune run --nproc-per-node N``).

:class:`TorchrunRunner` takes the place of :func:`dmlplug.run` in a trial (and in the reproductions): it starts

    python -m torch.distributed.run --standalone --nproc-per-node N -m dmlplug run RECIPE --out DIR --set ...

in a process group of its own and watches the run directory that rank 0 writes. Every evaluation rank 0 appends
to ``metrics.jsonl`` is handed to the per-run hooks' ``on_eval_end`` (the trial's
:class:`~dmlplug_builtins.tune.trials.FoldReporter`: the same running fold mean, the same pruning as in one
process); when the pruner says prune, the whole job (agent and ranks) gets SIGTERM — each rank checkpoints after
its current step — and SIGKILL after a grace period; the run's ``results.json`` then says ``pruned``, with the
pruner's reason, as in one process. The objective is the
``selection_metrics`` of the job's ``results.json``. A job that exits non-zero fails its trial with the run's
own error (``results.json``) or the first error line of its log (``fold-I.torchrun.log`` beside the run
directory). If the tune worker itself dies, the kernel sends the job's agent SIGTERM (Linux), so no orphaned
job keeps training.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmlplug.errors import RecipeError, RunError, RunStopped

#: Seconds between two looks at the job's metrics file, and how long a stopped job may take to checkpoint.
POLL = 0.25
GRACE = 30.0


@dataclass
class JobResult:
    """What a trial and the reproductions read of a finished job (the fields of :class:`dmlplug.RunResult`)."""

    run_dir: Path
    selection_metrics: dict[str, float]
    metrics: dict[str, float]
    results: dict[str, Any] = field(default_factory=dict)


def check_world(recipe: str | Path, overrides: Sequence[str], nproc: int) -> None:
    """Refuse, before any training, a recipe whose global batch does not divide into ``nproc`` ranks.

    Raises:
        RecipeError: ``data.batch_size`` is not a multiple of ``nproc``.
    """
    import dmlplug

    batch = int(dmlplug.validate(str(recipe), list(overrides)).recipe.data.batch_size)
    if batch % nproc:
        raise RecipeError(f"data.batch_size = {batch} (the global batch) does not divide into {nproc} processes",
                          where="--nproc-per-node", fix=f"use a batch size that is a multiple of {nproc}, or "
                                                        "another number of processes")


class TorchrunRunner:
    """Run a recipe as a torchrun job of ``nproc`` processes; called like :func:`dmlplug.run`.

    Args:
        nproc: Processes of the job (``--nproc-per-node``).
        poll: Seconds between two looks at the job's ``metrics.jsonl``.
        grace: Seconds a stopped job gets to checkpoint before it is killed.
    """

    def __init__(self, nproc: int, *, poll: float = POLL, grace: float = GRACE):
        self.nproc, self.poll, self.grace = nproc, poll, grace

    def command(self, recipe: str | Path, overrides: Sequence[str], out: Path, device: str | None,
                quiet: bool) -> list[str]:
        """The job's command line (torchrun's module, so the interpreter of this process runs it)."""
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={self.nproc}",
                   "-m", "dmlplug", "run", str(recipe), "--out", str(out)]
        for override in overrides:
            command += ["--set", override]
        if device:
            command += ["--device", device]
        return command + (["--quiet"] if quiet else [])

    def __call__(self, recipe: str | Path, overrides: Sequence[str], *, out: str | Path, device: str | None = None,
                 quiet: bool = True, hooks: Sequence[Any] = ()) -> JobResult:
        """Run the job to its end, handing its evaluations to ``hooks``; returns its results.

        Raises:
            RunError: The job exited non-zero, or its run did not complete.
            optuna.TrialPruned: A hook pruned the trial (the job was stopped first).
        """
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        log_path = out.parent / f"{out.name}.torchrun.log"
        with open(log_path, "w", encoding="utf-8") as log:
            process = subprocess.Popen(self.command(recipe, overrides, out, device, quiet), stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                       preexec_fn=_death_signal())
            try:
                self._watch(process, out / "metrics.jsonl", hooks)
            except BaseException as exc:  # pruned, interrupted: the job must not outlive its trial
                stop(process, self.grace)
                if isinstance(exc, RunStopped):
                    record_stop(out, exc)
                raise
        return finished(out, process.returncode, log_path)

    def _watch(self, process: subprocess.Popen[Any], metrics: Path, hooks: Sequence[Any]) -> None:
        seen: set[tuple[str, int]] = set()
        tail = MetricsTail(metrics)
        while True:
            code = process.poll()  # before reading: every line written before the exit is read below
            for line in tail.lines():
                key = (str(line.get("split")), int(line.get("epoch", -1)))
                # The closing "selected" line repeats an earlier epoch; each evaluation is handed over once.
                if line.get("report") == "selected" or key in seen:
                    continue
                seen.add(key)
                for hook in hooks:
                    if hasattr(hook, "on_eval_end"):
                        hook.on_eval_end(run=None, epoch=key[1], split=key[0], metrics=line)
            if code is not None:
                return
            time.sleep(self.poll)


class MetricsTail:
    """The complete lines appended to a ``metrics.jsonl`` since the last look (it may not exist yet)."""

    def __init__(self, path: Path):
        self.path, self.offset = path, 0

    def lines(self) -> Iterator[dict[str, Any]]:
        """New complete lines, parsed; a line still being written is left for the next look."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        for raw in chunk[:end].splitlines():
            if raw.strip():
                yield json.loads(raw)


def record_stop(out: Path, stopped: RunStopped) -> None:
    """Say in a stopped job's ``results.json`` why it stopped, as a run in one process does (``RunStopped``).

    Its ranks only saw SIGTERM and wrote ``interrupted``; the job has ended, so the file is no longer theirs.
    """
    from dmlplug.files import write_json

    path = out / "results.json"
    if not path.is_file():  # stopped before the run directory was complete: nothing to amend
        return
    payload = json.loads(path.read_text(encoding="utf-8"))
    payload.pop("error", None)
    write_json(path, {**payload, "status": stopped.status, "reason": stopped.what})


def finished(out: Path, code: int, log_path: Path) -> JobResult:
    """The results of a job that exited with ``code``.

    Raises:
        RunError: A non-zero exit or a run that did not complete, with the run's own error where it wrote one.
    """
    results_path = out / "results.json"
    results = json.loads(results_path.read_text(encoding="utf-8")) if results_path.is_file() else {}
    if code != 0 or results.get("status") != "completed":
        reason = results.get("error") or _error_line(log_path) or f"status {results.get('status', 'unknown')}"
        reason = reason.splitlines()[0]  # the run's error renders its where and fix on further lines
        raise RunError(f"the torchrun job exited with code {code}: {reason}", where=str(out),
                       fix=f"see {log_path}")
    return JobResult(run_dir=out, selection_metrics=dict(results.get("selection_metrics") or {}),
                     metrics=dict(results.get("metrics") or {}), results=results)


def _error_line(log_path: Path) -> str:
    """The first ``error:`` line a rank printed (dmlplug's one-line errors), else the log's last line."""
    lines = [line.strip() for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines()
             if line.strip()]
    for line in lines:
        if line.startswith(("error:", "internal error:")):
            return line
    return lines[-1] if lines else ""


def stop(process: subprocess.Popen[Any], grace: float) -> None:
    """SIGTERM to the job's process group (agent and ranks: each checkpoints), SIGKILL after ``grace`` seconds."""
    if process.poll() is not None:  # the agent is gone; a rank may not be yet
        _reap_group(process.pid)
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    _reap_group(process.pid)


def _reap_group(group: int) -> None:
    # A rank may outlive its agent by a moment; the group is gone once nothing answers signal 0.
    for _ in range(40):
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def _death_signal() -> Any:
    """A function for the child before exec: SIGTERM to it when the tune worker dies (Linux; else ``None``).

    libc is loaded here, in the parent: between fork and exec the child only makes the one ``prctl`` call
    (``preexec_fn`` runs in the forked child, where loading a library could deadlock on another thread's lock).
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def child() -> None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return child
