"""Continuing a run from its directory: locate it, compare recipes, restore the checkpointed state.

A resumed run rebuilds every component from the run directory's ``recipe.resolved.toml`` (or from the
recipe given on the command line, which must resolve to the same thing unless ``--force``), loads
``checkpoints/last.pt`` and continues at the exact batch where the checkpoint was written: samplers are
functions of ``(seed, epoch)``, so the batches already trained in the epoch are skipped without loading
anything, and every random number generator is restored.
"""

from __future__ import annotations

import json
import time
import tomllib
from pathlib import Path
from typing import Any

from dmlplug.engine import rundir
from dmlplug.engine.flatten import flatten_recipe
from dmlplug.errors import RunError
from dmlplug.files import write_text
from dmlplug.secrets import masked_argv

#: Log of every resume of a run directory (one JSON object per line).
RESUME_LOG = "resume.jsonl"
LAST = "last.pt"


def is_run_directory(path: str | Path) -> bool:
    """True when ``path`` is a folder holding a ``recipe.resolved.toml``."""
    path = Path(path)
    return path.is_dir() and (path / rundir.RESOLVED_RECIPE).is_file()


def latest_run_directory(output_dir: str | Path, name: str) -> Path:
    """The most recently checkpointed run directory of ``<output_dir>/<name>/``.

    Raises:
        RunError: There is none.
    """
    parent = Path(output_dir) / name
    candidates = [p for p in parent.glob("*") if (p / rundir.CHECKPOINTS / LAST).is_file()] if parent.is_dir() else []
    if not candidates:
        raise RunError(f"--resume: no run of {name!r} with a checkpoint under {parent}",
                       where="--resume", fix="give the run directory: --out RUN_DIR (or `dmlplug run RUN_DIR`)")
    return max(candidates, key=lambda p: (p / rundir.CHECKPOINTS / LAST).stat().st_mtime)


def checkpoint_path(directory: Path) -> Path:
    """``<run>/checkpoints/last.pt``.

    Raises:
        RunError: The run has no checkpoint yet.
    """
    path = Path(directory) / rundir.CHECKPOINTS / LAST
    if not path.is_file():
        raise RunError(f"nothing to resume: {directory} has no checkpoints/{LAST}",
                       where=str(directory), fix="start a new run (the run stopped before its first checkpoint)")
    return path


def recipe_diff(old_toml: str, new_toml: str) -> list[dict[str, Any]]:
    """Keys whose resolved values differ between two resolved recipes, as ``{key, old, new}`` records.

    A key missing on one side is reported with ``None`` there.
    """
    old, new = flatten_recipe(tomllib.loads(old_toml)), flatten_recipe(tomllib.loads(new_toml))
    return [{"key": key, "old": old.get(key), "new": new.get(key)}
            for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]


def check_recipe(directory: Path, new_toml: str, force: bool) -> list[dict[str, Any]]:
    """Compare ``new_toml`` with the run's stored resolved recipe; refuse differences unless ``force``.

    Returns:
        The differences (empty when the recipes resolve identically).

    Raises:
        RunError: The recipes differ and ``force`` is False.
    """
    stored = (Path(directory) / rundir.RESOLVED_RECIPE).read_text(encoding="utf-8")
    diff = recipe_diff(stored, new_toml)
    if diff and not force:
        shown = "; ".join(f"{d['key']}: {d['old']!r} -> {d['new']!r}" for d in diff[:8])
        more = f" (and {len(diff) - 8} more)" if len(diff) > 8 else ""
        raise RunError(
            f"the recipe differs from the one the run was started with: {shown}{more}",
            where=f"{directory / rundir.RESOLVED_RECIPE}",
            fix="resume with the original recipe (`dmlplug run RUN_DIR --resume`), or pass --force to continue "
                "with the new one (the difference is recorded in resume.jsonl)",
        )
    return diff


def record_resume(directory: Path, state: dict[str, Any], diff: list[dict[str, Any]], forced: bool,
                  new_toml: str, world_size: int) -> None:
    """Append this resume to ``resume.jsonl``; with a forced change, store the new resolved recipe."""
    record = {
        "time": time.time(),
        "from_epoch": state.get("epoch"),
        "from_step": state.get("step"),
        "epoch_complete": state.get("epoch_complete", True),
        "recipe_changes": diff,
        "forced": bool(forced and diff),
        "world_size": world_size,
        "command": masked_argv(),
    }
    line = json.dumps(record, default=str) + "\n"
    with open(Path(directory) / RESUME_LOG, "a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
    if diff:
        write_text(Path(directory) / rundir.RESOLVED_RECIPE, new_toml)


def trim_metrics(directory: Path, step: int) -> None:
    """Drop ``metrics.jsonl`` records written after the checkpoint (they will be written again).

    Those are the records of a later step, and the end-of-run report of the selected checkpoint (``"report"``
    key: written after the last checkpoint with that checkpoint's earlier step), which a run continued with more
    epochs reports again at its new end.
    """
    path = Path(directory) / rundir.METRICS_LOG
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a kill: it was after the checkpoint anyway
            continue
        if int(record.get("step", 0)) <= step and "report" not in record:
            kept.append(line)
    write_text(path, "".join(f"{line}\n" for line in kept))


def completed(state: dict[str, Any], epochs: int) -> bool:
    """True when the checkpoint already holds every epoch the recipe asks for."""
    return state.get("epoch_complete", True) and int(state.get("epoch", 0)) >= epochs and epochs > 0


class RunInterrupted(RunError):
    """The run stopped on SIGTERM/SIGINT after checkpointing; exits with ``128 + signal number``."""

    def __init__(self, what: str, *, signum: int, where: str | None = None, fix: str | None = None):
        super().__init__(what, where=where, fix=fix)
        self.exit_code = 128 + int(signum)
