"""ooDML sweeps: one training run per split and seed, resumable (``dmlplug oodml run``).

Layout of a sweep directory::

    SWEEP_DIR/
      sweep.json               recipe text, overrides, seeds, a hash of the split file
      splits.json              the split file the runs use (a copy; published pickles are converted)
      split-01/seed-0/         an ordinary run directory (results.json, metrics.jsonl, checkpoints …)
      split-01/seed-1/ …

A run counts as finished when its ``results.json`` says ``"status": "completed"``; running the sweep
again skips finished runs and starts unfinished ones afresh, so an interrupted sweep continues where
it stopped. Nothing here imports torch at module level.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmlplug.errors import DataError, RunError

MANIFEST = "sweep.json"
SPLITS = "splits.json"
FORMAT = "dmlplug.oodml.sweep"


def run_directory(sweep_dir: str | Path, split_id: int, seed: int) -> Path:
    """``SWEEP_DIR/split-<id>/seed-<seed>``."""
    return Path(sweep_dir) / f"split-{split_id:02d}" / f"seed-{seed}"


def run_status(directory: Path) -> str | None:
    """The ``status`` in ``results.json`` of a run directory, or None when there is none (yet)."""
    results = directory / "results.json"
    if not results.is_file():
        return None
    try:
        return json.loads(results.read_text(encoding="utf-8")).get("status")
    except (OSError, json.JSONDecodeError):
        return None


def load_split_source(path: str | Path) -> Any:
    """A split file, JSON (``dmlplug oodml splits``) or a published ooDML pickle (``.pkl``)."""
    from dmlplug.oodml.splitfile import load_published_pickle, load_splits

    text = str(path)
    return load_published_pickle(text) if text.endswith(".pkl") else load_splits(text)


@dataclass
class SweepReport:
    """What a sweep did: run directories that ran, were skipped, per (split, seed)."""

    sweep_dir: Path
    ran: list[tuple[int, int]] = field(default_factory=list)
    skipped: list[tuple[int, int]] = field(default_factory=list)
    restarted: list[tuple[int, int]] = field(default_factory=list)


def prepare_sweep(recipe: str | Path, splits: str | Path, seeds: Sequence[int], sweep_dir: str | Path,
                  overrides: Sequence[str] = ()) -> tuple[Path, Any, dict[str, Any]]:
    """Create (or check and reuse) the sweep directory; returns ``(splits copy, split file, manifest)``.

    Raises:
        RunError: The directory belongs to another recipe, other overrides or another split file.
    """
    from dmlplug.engine.atomic import write_json
    from dmlplug.oodml.splitfile import save_splits

    recipe_path = Path(recipe)
    if not recipe_path.is_file():
        raise RunError(f"recipe file not found: {recipe_path}", fix="check the path")
    split_file = load_split_source(splits)
    directory = Path(sweep_dir)
    copy = directory / SPLITS
    canonical = json.dumps(split_file.model_dump(mode="json"), sort_keys=True)
    manifest = {
        "format": FORMAT,
        "recipe": str(recipe_path.resolve()),
        "recipe_text": recipe_path.read_text(encoding="utf-8"),
        "overrides": list(overrides),
        "splits_source": str(Path(splits).resolve()),
        "splits_sha256": hashlib.sha256(canonical.encode()).hexdigest(),
        "split_ids": [s.id for s in split_file.splits],
        "seeds": sorted(set(int(s) for s in seeds)),
    }
    existing_path = directory / MANIFEST
    if existing_path.is_file():
        existing = json.loads(existing_path.read_text(encoding="utf-8"))
        for key, label in (("recipe_text", "recipe"), ("overrides", "--set overrides"),
                           ("splits_sha256", "split file")):
            if existing.get(key) != manifest[key]:
                raise RunError(
                    f"the sweep directory {directory} was made with a different {label}",
                    where=str(existing_path),
                    fix="use a new --out directory for a changed sweep, or rerun with the original inputs",
                )
        manifest["seeds"] = sorted(set(existing.get("seeds", [])) | set(manifest["seeds"]))
    elif directory.exists() and any(directory.iterdir()):
        raise RunError(f"{directory} exists, is not empty and is not a sweep directory (no {MANIFEST})",
                       where="--out", fix="choose a new or empty directory")
    save_splits(copy, split_file)
    write_json(existing_path, manifest)
    return copy, split_file, manifest


def run_sweep(
    recipe: str | Path,
    splits: str | Path,
    *,
    seeds: Sequence[int] = (0,),
    sweep_dir: str | Path,
    overrides: Sequence[str] = (),
    split_ids: Sequence[int] | None = None,
    device: str | None = None,
    quiet: bool = True,
    runner: Callable[..., Any] | None = None,
    echo: Callable[[str], None] = print,
) -> SweepReport:
    """Train and evaluate ``recipe`` on every split (or ``split_ids``) for every seed.

    Each run gets ``data.split_file`` (the sweep's copy), ``data.split_id`` and ``run.seed`` as overrides
    on top of ``overrides``, and the run directory :func:`run_directory`. Finished runs are skipped; an
    unfinished run directory (interrupted or failed) is deleted and its run started again.

    Args:
        recipe: The recipe file.
        splits: Split file (JSON or published ``.pkl``).
        seeds: Run seeds.
        sweep_dir: The sweep directory.
        overrides: ``--set`` strings applied to every run.
        split_ids: Only these splits (default: all).
        device: ``auto``/``cpu``/``cuda`` for every run.
        quiet: No progress bars.
        runner: Replacement for :func:`dmlplug.engine.launch.run_recipe` (tests).
        echo: Where progress lines go.

    Raises:
        DataError: A requested split id is not in the file.
        RunError: The sweep directory belongs to another sweep (see :func:`prepare_sweep`).
    """
    from dmlplug.recipe import override_pairs

    if runner is None:
        from dmlplug.engine.launch import run_recipe as runner
    if not seeds:
        raise RunError("no seeds given", where="--seeds", fix="e.g. --seeds 0,1,2")
    copy, split_file, _ = prepare_sweep(recipe, splits, seeds, sweep_dir, overrides)
    available = [s.id for s in split_file.splits]
    chosen = list(split_ids) if split_ids else available
    unknown = [i for i in chosen if i not in available]
    if unknown:
        raise DataError(f"split id {unknown[0]} is not in the split file", where=str(splits),
                        fix=f"use ids among {available}")
    report = SweepReport(Path(sweep_dir))
    base = override_pairs(list(overrides))
    total = len(chosen) * len(seeds)
    done = 0
    for split_id in chosen:
        for seed in seeds:
            done += 1
            directory = run_directory(sweep_dir, split_id, seed)
            status = run_status(directory)
            if status == "completed":
                report.skipped.append((split_id, seed))
                echo(f"[{done}/{total}] split {split_id} seed {seed}: finished earlier, skipped")
                continue
            if directory.exists():
                # An interrupted or failed run of this sweep: its directory is ours to replace.
                shutil.rmtree(directory)
                report.restarted.append((split_id, seed))
            echo(f"[{done}/{total}] split {split_id} seed {seed}: running -> {directory}")
            pairs = {**base, "data.split_file": str(copy.resolve()), "data.split_id": split_id,
                     "run.seed": int(seed)}
            runner(recipe, pairs, out=directory, device=device, quiet=quiet)
            report.ran.append((split_id, seed))
    return report
