"""ooDML sweeps: one training run per split and seed, resumable (``dmlplug oodml run``).

Layout of a sweep directory::

    SWEEP_DIR/
      sweep.json               recipe text, overrides, part, seeds, a hash of the split file
      splits.json              the split file the runs use (a copy; published pickles are converted)
      split-01/recipe.toml     the recipe of split 1: its [data.dataset] wrapped in dataset "oodml_split"
      split-01/seed-0/         an ordinary run directory (results.json, metrics.jsonl, checkpoints …)
      split-01/seed-1/ …
      journal.log              the runs' study when workers share them (--worker without --storage)

A run counts as finished when its ``results.json`` says ``"status": "completed"``; running the sweep
again skips finished runs and starts unfinished ones afresh, so an interrupted sweep continues where
it stopped. With ``--worker`` (or ``--storage``) the (split, seed) runs are the cells of a grid study on the
public grid engine of the tune plugin (:mod:`dmlplug_builtins.tune.grid`, :func:`run_on_study`), so several
processes and machines share one sweep; only they need the tune plugin (:func:`require_tune`). The
``--set`` overrides name keys of the original recipe: those under ``data.dataset`` are moved to the wrapped
dataset (``data.dataset.root`` becomes ``data.dataset.dataset.root``). Nothing here
imports torch at module level.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmlplug.errors import DataError, PluginError, RunError

MANIFEST = "sweep.json"
SPLITS = "splits.json"
RECIPE = "recipe.toml"
PARTS = ("zero_shot", "few_shot_base")
FORMAT = "dmlplug.oodml.sweep"
#: The study of a sweep run by workers (``--worker``, ``--storage``).
STUDY = "dmlplug-oodml"
#: The plugin whose public grid engine (:mod:`dmlplug_builtins.tune.grid`) shares a sweep's runs between workers.
GRID_PLUGIN = "tune"


def require_tune(registry: Any, command: str) -> None:
    """Fail unless the tune plugin, whose grid engine shares a sweep's runs between workers, is loaded.

    ooDML needs it for ``--worker`` and ``--storage`` only. ``registry`` is the command's host's
    (:meth:`dmlplug.BuildContext.registry`): a disabled plugin's package can still be imported.

    Raises:
        PluginError: The tune plugin is disabled, not installed, or failed to load.
    """
    error = registry.load_errors.get(GRID_PLUGIN)
    if GRID_PLUGIN in registry.origins and error is None:
        return
    which = f"which failed to load ({error})" if error else "which is not loaded (disabled, or not installed)"
    raise PluginError(f"{command} shares the runs between workers through the grid engine of the tune plugin, "
                      + which, where=f"plugin {GRID_PLUGIN!r}",
                      fix="enable the tune plugin (remove tune from DMLPLUG_DISABLE_PLUGINS; `dmlplug plugins` "
                          "lists the loaded plugins), or run without --worker and --storage")


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


@dataclass
class SweepReport:
    """What a sweep did: the (split, seed) runs that ran, were skipped or restarted, and how long each that ran took."""

    sweep_dir: Path
    ran: list[tuple[int, int]] = field(default_factory=list)
    skipped: list[tuple[int, int]] = field(default_factory=list)
    restarted: list[tuple[int, int]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


def prepare_sweep(recipe: str | Path, splits: str | Path, seeds: Sequence[int], sweep_dir: str | Path,
                  overrides: Sequence[str] = (), part: str = "zero_shot",
                  study: str | None = None) -> tuple[Path, Any, dict[str, Any]]:
    """Create (or check and reuse) the sweep directory; returns ``(splits copy, split file, manifest)``.

    ``study`` is the name of the sweep's grid study, when its runs are shared by workers (kept once recorded).

    Raises:
        RunError: The directory belongs to another recipe, other overrides, part or split file.
    """
    from dmlplug.files import claim_directory, write_json
    from dmlplug_builtins.oodml.splitfile import read_split_file, save_splits

    recipe_path = Path(recipe)
    if not recipe_path.is_file():
        raise RunError(f"recipe file not found: {recipe_path}", fix="check the path")
    split_file = read_split_file(splits)
    directory = Path(sweep_dir)
    copy = directory / SPLITS
    canonical = json.dumps(split_file.model_dump(mode="json"), sort_keys=True)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "recipe": str(recipe_path.resolve()),
        "recipe_text": recipe_path.read_text(encoding="utf-8"),
        "overrides": list(overrides),
        "part": part,
        "splits_source": str(Path(splits).resolve()),
        "splits_sha256": hashlib.sha256(canonical.encode()).hexdigest(),
        "split_ids": [s.id for s in split_file.splits],
        "seeds": sorted(set(int(s) for s in seeds)),
    }
    existing_path = directory / MANIFEST
    existing = claim_directory(directory, MANIFEST, manifest, what="ooDML sweep", option="--out",
                               compare={"recipe_text": "recipe", "overrides": "--set overrides",
                                        "part": "--part", "splits_sha256": "split file"},
                               legacy={"part": "zero_shot"})  # sweeps made before --part existed
    if existing is not None:
        manifest["seeds"] = sorted(set(existing.get("seeds", [])) | set(manifest["seeds"]))
        if "study" in existing:
            manifest["study"] = existing["study"]
    if study is not None:
        manifest["study"] = study
    write_json(existing_path, manifest)  # first: workers starting together on a new --out see whose it is
    save_splits(copy, split_file)
    return copy, split_file, manifest


def run_sweep(
    recipe: str | Path,
    splits: str | Path,
    *,
    seeds: Sequence[int] = (0,),
    sweep_dir: str | Path,
    overrides: Sequence[str] = (),
    split_ids: Sequence[int] | None = None,
    part: str = "zero_shot",
    device: str | None = None,
    quiet: bool = True,
    runner: Callable[..., Any] | None = None,
    check_data: bool = True,
    echo: Callable[[str], None] = print,
    storage: str | None = None,
    worker: bool = False,
    study_name: str | None = None,
) -> SweepReport:
    """Train and evaluate ``recipe`` on every split (or ``split_ids``) for every seed.

    Each split gets its own recipe, ``SWEEP_DIR/split-<id>/recipe.toml`` (see :func:`split_recipe`); each run
    trains it with ``overrides`` (see :func:`wrapped_overrides`) and ``run.seed`` into the run directory
    :func:`run_directory`. Finished runs are skipped; an unfinished run directory (interrupted or failed) is
    deleted and its run started again. Before the first run, every split with a run to do has its data checked
    (:func:`dmlplug.check_data`: dataset and sampler built, nothing trained), so a split the recipe cannot train
    on (too few classes for the sampler, say) stops the sweep in seconds, not after the runs before it.

    Args:
        recipe: The recipe file; its ``[data.dataset]`` is the dataset every split re-partitions.
        splits: Split file (JSON or published ``.pkl``).
        seeds: Run seeds.
        sweep_dir: The sweep directory.
        overrides: ``--set`` strings applied to every run, in terms of ``recipe``.
        split_ids: Only these splits (default: all).
        part: ``"zero_shot"`` or ``"few_shot_base"`` (see dataset ``oodml_split``).
        device: ``auto``/``cpu``/``cuda`` for every run.
        quiet: No progress bars.
        runner: Replacement for :func:`dmlplug.run` (tests), called as ``runner(recipe_path, overrides, out=,
            device=, quiet=)``.
        check_data: Check every pending split's data before the first run.
        echo: Where progress lines go.
        storage: A database URL shared by workers on several machines; with it, or with ``worker``, the runs
            are the cells of a grid study (see :func:`run_on_study`).
        worker: Join the sweep as one more worker: take runs no other worker took, stop when none is left.
        study_name: The grid study's name in its storage (default: the one the directory records, else
            ``dmlplug-oodml``), so that one database can hold several sweeps.

    Raises:
        DataError: A requested split id is not in the file.
        RecipeError: The recipe is invalid.
        RunError: The sweep directory belongs to another sweep (see :func:`prepare_sweep`), or the recipe
            already selects an ooDML split.
        DmlplugError: A split's data check fails (the error of :func:`dmlplug.check_data`, naming the split).
    """
    import dmlplug
    from dmlplug_builtins.oodml.splitfile import read_split_file

    runner = runner or dmlplug.run
    if not seeds:
        raise RunError("no seeds given", where="--seeds", fix="e.g. --seeds 0,1,2")
    if part not in PARTS:
        raise RunError(f"--part must be one of {', '.join(PARTS)}, got {part!r}", where="--part")
    base = base_recipe(recipe)
    available = [s.id for s in read_split_file(splits).splits]
    chosen = list(split_ids) if split_ids else available
    unknown = [i for i in chosen if i not in available]
    if unknown:
        raise DataError(f"split id {unknown[0]} is not in the split file", where=str(splits),
                        fix=f"use ids among {available}")
    forwarded = wrapped_overrides(overrides)
    first_run = [*forwarded, f"run.seed={int(seeds[0])}"]
    # Everything is checked before the sweep directory is made, so that a fix (another --set) can reuse --out.
    # The recipes checked are the wrapped ones the runs train: a few-shot base part has the validation split
    # that `evaluation.select_on = "val"` needs (and that "auto" selects on), which the plain recipe lacks.
    for split_id in chosen:
        wrapped = split_recipe(base, Path(splits).resolve(), split_id, part)
        dmlplug.validate(wrapped, first_run)
        pending = any(run_status(run_directory(sweep_dir, split_id, seed)) != "completed" for seed in seeds)
        if check_data and pending:
            check_split(wrapped, first_run, split_id)
    shared = worker or storage is not None
    if study_name is not None and not shared:
        raise RunError("--study names the study that workers share; a sweep without --worker or --storage has none",
                       where="--study", fix="add --worker (or --storage URL), or leave out --study")
    name = None
    if shared:
        from dmlplug_builtins.tune.grid import open_storage, resolve_study_name

        name = resolve_study_name(Path(sweep_dir) / MANIFEST, study_name, STUDY)
        if storage is not None:  # an unreachable database is an error before anything is written
            open_storage(Path(sweep_dir), storage)
    splits_copy, split_file, _ = prepare_sweep(recipe, splits, seeds, sweep_dir, overrides, part, name)
    report = SweepReport(Path(sweep_dir))
    total = len(chosen) * len(seeds)
    done = 0
    split_paths = {split_id: write_split_recipe(split_recipe(base, splits_copy.resolve(), split_id, part),
                                                Path(sweep_dir) / f"split-{split_id:02d}" / RECIPE, recipe)
                   for split_id in chosen}
    if shared:
        return run_on_study(report, chosen, seeds, split_paths, forwarded, storage=storage, worker=worker,
                            device=device, quiet=quiet, runner=runner, echo=echo, study_name=name or STUDY)
    for split_id in chosen:
        split_path = split_paths[split_id]
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
            started = time.perf_counter()
            runner(split_path, [*forwarded, f"run.seed={int(seed)}"], out=directory, device=device, quiet=quiet)
            report.ran.append((split_id, seed))
            report.seconds.append(time.perf_counter() - started)
            echo(f"[{done}/{total}] split {split_id} seed {seed}: finished in {report.seconds[-1]:.0f} s"
                 + remaining_time(report.seconds, total - done))
    return report


def run_on_study(report: SweepReport, split_ids: Sequence[int], seeds: Sequence[int], split_paths: dict[int, Path],
                 forwarded: Sequence[str], *, storage: str | None, worker: bool, device: str | None, quiet: bool,
                 runner: Callable[..., Any], echo: Callable[[str], None], study_name: str = STUDY) -> SweepReport:
    """The sweep's (split, seed) runs as the cells of a grid study (the tune plugin's public grid engine).

    Any number of ``--worker`` processes (and machines, with a database ``storage``) share the runs: each is
    trained exactly once, a lost worker's run is failed and trained again once; the journal file (default) is
    ``SWEEP_DIR/journal.log``. A run directory already completed (by a plain ``oodml run``, say) is not trained
    again. Without ``worker`` the command waits for the other workers' runs to end.
    """
    from dmlplug_builtins.tune.grid import Cell, open_grid_study, work

    sweep_dir = report.sweep_dir
    manifest = json.loads((sweep_dir / MANIFEST).read_text(encoding="utf-8"))
    identity = hashlib.sha256(json.dumps({k: manifest.get(k) for k in ("recipe_text", "overrides", "part",
                                                                       "splits_sha256")},
                                         sort_keys=True).encode()).hexdigest()
    study = open_grid_study(sweep_dir, storage, study_name, identity)
    cells = [Cell(run_directory("", i, s).as_posix(), {"split": int(i), "seed": int(s)}) for i in split_ids
             for s in seeds]

    def run_cell(cell: Cell) -> dict[str, float]:
        split_id, seed = int(cell.values["split"]), int(cell.values["seed"])
        directory = run_directory(sweep_dir, split_id, seed)
        if run_status(directory) != "completed":
            if directory.exists():
                shutil.rmtree(directory)  # an unfinished run of this cell (its worker died): ours to replace
                report.restarted.append((split_id, seed))
            split_path = split_paths.get(split_id)
            if split_path is None:  # a split another worker queued
                split_path = write_split_recipe(split_recipe(base_recipe(manifest["recipe"]),
                                                             (sweep_dir / SPLITS).resolve(), split_id,
                                                             manifest["part"]),
                                                sweep_dir / f"split-{split_id:02d}" / RECIPE, manifest["recipe"])
            started = time.perf_counter()
            runner(split_path, [*forwarded, f"run.seed={seed}"], out=directory, device=device, quiet=quiet)
            status = run_status(directory)
            if status != "completed":
                raise RunError(f"the run of split {split_id} seed {seed} ended {status or 'without results'}",
                               where=str(directory))
            report.ran.append((split_id, seed))
            report.seconds.append(time.perf_counter() - started)
        else:
            report.skipped.append((split_id, seed))
        results = json.loads((directory / "results.json").read_text(encoding="utf-8"))
        return {k: float(v) for k, v in results.get("metrics", {}).items() if isinstance(v, (int, float))}

    work(study, cells, run_cell, wait=not worker, echo=echo)
    return report


def remaining_time(seconds: Sequence[float], runs_left: int) -> str:
    """``"; about 12 min left"`` from the mean time of the runs so far (empty when nothing is left)."""
    if not runs_left or not seconds:
        return ""
    left = runs_left * sum(seconds) / len(seconds)
    return f"; about {left / 60:.0f} min left" if left >= 90 else f"; about {left:.0f} s left"


def check_split(wrapped: dict[str, Any], overrides: Sequence[str], split_id: int) -> None:
    """:func:`dmlplug.check_data` of one split's recipe (see :func:`split_recipe`); its error names the split.

    Raises:
        DmlplugError: The error of the check, of the same class, with ``split <id>:`` in front.
    """
    import dmlplug
    from dmlplug.errors import DmlplugError

    try:
        dmlplug.check_data(wrapped, list(overrides))
    except DmlplugError as exc:
        raise type(exc)(f"split {split_id} cannot be trained: {exc.what}", where=exc.where or f"split {split_id}",
                        fix=exc.fix) from None


def base_recipe(recipe: str | Path) -> dict[str, Any]:
    """The recipe as a TOML dict, after checking that it wraps nothing (the sweep validates the wrapped recipes).

    Raises:
        RecipeError: The file is not TOML.
        RunError: The file is missing, or its dataset is already an ``oodml_split``.
    """
    from dmlplug.errors import RecipeError

    path = Path(recipe)
    if not path.is_file():
        raise RunError(f"recipe file not found: {path}", fix="check the path")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{path} is not valid TOML: {exc}", where=str(path)) from None
    if not isinstance(raw.get("data"), dict) or not isinstance(raw["data"].get("dataset"), dict):
        raise RecipeError("the recipe has no [data.dataset] table for the sweep to wrap", where=str(path),
                          fix='add [data.dataset] with the plain dataset, e.g. name = "cub200"')
    if raw["data"]["dataset"].get("name") == "oodml_split":
        raise RunError("the recipe already selects an ooDML split ([data.dataset] name = \"oodml_split\")",
                       where=str(path), fix="give the recipe of the plain dataset: the sweep wraps its "
                                            "[data.dataset] in oodml_split for every split")
    return raw


def split_recipe(base: dict[str, Any], split_file: Path, split_id: int, part: str = "zero_shot") -> dict[str, Any]:
    """``base`` with its ``[data.dataset]`` wrapped in dataset ``oodml_split`` for split ``split_id``."""
    recipe = copy.deepcopy(base)
    data = recipe["data"]
    data["dataset"] = {"name": "oodml_split", "split_file": str(split_file), "split_id": int(split_id),
                       "part": part, "dataset": data["dataset"]}
    return recipe


def write_split_recipe(recipe: dict[str, Any], path: Path, source: str | Path) -> Path:
    """Write a generated split recipe as TOML (atomically) with a header naming where it comes from."""
    import tomli_w

    from dmlplug.files import write_text

    header = f"# Generated by `dmlplug oodml run` from {Path(source).resolve()}; edits are overwritten.\n"
    return write_text(path, header + tomli_w.dumps(recipe))


def wrapped_overrides(overrides: Sequence[str]) -> list[str]:
    """``--set`` strings of the original recipe, with ``data.dataset`` keys moved to the wrapped dataset."""
    moved = []
    for text in overrides:
        key, sep, value = text.partition("=")
        name = key.strip()
        if sep and (name == "data.dataset" or name.startswith("data.dataset.")):
            text = "data.dataset.dataset" + name.removeprefix("data.dataset") + "=" + value
        moved.append(text)
    return moved
