"""``dmlplug sweep``: a recipe trained over a grid of values and seeds, on the engine of ``dmlplug tune``.

The grid comes from a sweep file ``NAME.sweep.toml`` (the space-file format with categorical parameters, and a
``[sweep]`` table with the seeds) and/or ``--grid KEY=V1,V2`` on the command line (added to the file's, or
replacing a key of it); ``--seeds`` replaces the file's seeds. Every value is checked against the recipe's
schema by :func:`.space.check_space` before anything is written. Each (configuration, seed) is an ordinary run
of the recipe as written, ``SWEEP_DIR/runs/<configuration>/seed-S``; the runs are the cells of a
:mod:`.grid` study (journal file in the sweep directory, or ``--storage``), shared by ``--worker`` processes.

Layout of a sweep directory::

    SWEEP_DIR/
      sweep.json                                  format, recipe, --set overrides, identity, metric and mode
      journal.log                                 the embedded storage (not with --storage)
      runs/loss.margin=0.1,optimizer.lr=0.001/seed-0   an ordinary run directory per cell
      report/sweep.md, report/best.toml           `dmlplug sweep report`
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import shutil
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from dmlplug import read_value
from dmlplug.errors import RecipeError, RunError
from dmlplug.params import Params

MANIFEST = "sweep.json"
FORMAT = "dmlplug.sweep"
STUDY = "dmlplug-sweep"
SEED_KEY = "run.seed"


class SweepSettings(Params):
    """``[sweep]`` of a sweep file."""

    seeds: list[int] = Field(default_factory=lambda: [0], description="Run seeds of every configuration.")
    metric: str | None = Field(None, description="Metric that ranks the configurations in the report "
                                                 "(default: the recipe's [evaluation] metric).")


class SweepFile(Params):
    """A whole sweep file: the recipe, the seeds, the grid (categorical parameters of the space format)."""

    recipe: str = Field(description="The recipe, relative to the sweep file.")
    sweep: SweepSettings = Field(default_factory=SweepSettings, description="Seeds and the ranking metric.")
    params: dict[str, Any] = Field(default_factory=dict, description="Swept recipe keys (categorical).")


class Grid:
    """A checked grid: the recipe, the space (for :func:`.space.check_space`), seeds, metric and its mode."""

    def __init__(self, space: Any, seeds: list[int], metric: str, mode: str, overrides: list[str]):
        self.space, self.seeds, self.metric, self.mode, self.overrides = space, seeds, metric, mode, overrides
        self.recipe_path: Path = space.recipe_path

    def configurations(self) -> list[dict[str, Any]]:
        """Every combination of the values, in file order; a conditional key only where its condition holds."""
        configs: list[dict[str, Any]] = [{}]
        for key, param in self.space.params.items():
            configs = [{**c, key: v} for c in configs if param.active(c) for v in param.choices] + \
                      [c for c in configs if not param.active(c)]  # the recipe's own value stays
        unique: dict[str, dict[str, Any]] = {}
        for config in configs:
            unique.setdefault(json.dumps(config, sort_keys=True), config)
        return list(unique.values())

    def cells(self) -> list[Any]:
        """One :class:`.grid.Cell` per configuration and seed: ``runs/<slug>/seed-S``."""
        from dmlplug_builtins.tune.grid import Cell

        return [Cell(f"runs/{slug(config)}/seed-{seed}", {**config, SEED_KEY: seed})
                for config, seed in itertools.product(self.configurations(), self.seeds)]

    def identity(self) -> str:
        """What makes the runs comparable: the recipe text and the overrides (the grid may grow on a rerun)."""
        blob = {"recipe": self.recipe_path.read_text(encoding="utf-8"), "overrides": self.overrides}
        return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()


def slug(config: dict[str, Any]) -> str:
    """A configuration's folder name: ``loss.margin=0.1,optimizer.lr=0.001`` (``default`` when empty)."""
    if not config:
        return "default"
    text = ",".join(f"{k}={v}" for k, v in config.items())
    text = re.sub(r"[^A-Za-z0-9._=,+@\[\]-]", "-", text)
    if len(text) > 120:  # file names have limits; the hash keeps long ones apart
        text = text[:100] + "-" + hashlib.sha256(text.encode()).hexdigest()[:12]
    return text


def parse_grid(items: Sequence[str]) -> dict[str, list[Any]]:
    """``--grid KEY=V1,V2`` strings -> ``{key: [values]}``, values parsed as TOML (bare words are strings).

    Raises:
        RecipeError: An item without ``=`` or without values.
    """
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise RecipeError(f"--grid {item!r} is not KEY=V1,V2,...", where=f"--grid {item}",
                              fix="e.g. --grid loss.margin=0.1,0.2")
        try:
            values = tomllib.loads(f"v = [{text}]")["v"]
        except tomllib.TOMLDecodeError:  # bare words among them: each part on its own, like a --set value
            values = [read_value(part) for part in text.split(",") if part.strip()]
        if not values:
            raise RecipeError(f"--grid {key}= lists no values: the grid would be empty", where=f"--grid {item}",
                              fix="give one value or more, e.g. --grid loss.margin=0.1,0.2")
        grid[key] = values
    return grid


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``.

    Raises:
        RecipeError: Not comma-separated non-negative integers, or none.
    """
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise RecipeError(f"--seeds must be comma-separated integers, got {text!r}", where="--seeds") from None
    if not seeds or min(seeds) < 0:
        raise RecipeError(f"--seeds needs one non-negative integer or more, got {text!r}", where="--seeds",
                          fix="e.g. --seeds 0,1,2")
    return seeds


def load_grid(target: str | Path, grid: Sequence[str] = (), seeds: str | None = None,
              overrides: Sequence[str] = ()) -> Grid:
    """Read a sweep file (or a recipe), add ``--grid``, and check every value against the recipe's schema.

    Raises:
        RecipeError: A missing or invalid file, a key the recipe lacks, a value the field refuses, a range type,
            an empty grid or no seeds; nothing is written.
    """
    import dmlplug
    from dmlplug_builtins.tune.space import ParamSpec, SearchSpace, check_space

    path = Path(target)
    if not path.is_file():
        raise RecipeError(f"file not found: {path}", where=str(path), fix="give a recipe or a NAME.sweep.toml")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{path} is not valid TOML: {exc}", where=str(path)) from None
    is_sweep_file = path.name.endswith(".sweep.toml")
    try:
        spec = SweepFile.model_validate(raw) if is_sweep_file else SweepFile(recipe=path.name)
        params = {k: ParamSpec.model_validate(v) for k, v in spec.params.items()}
        from_cli = {k: ParamSpec(type="categorical", choices=v) for k, v in parse_grid(grid).items()}
        params.update(from_cli)
    except ValidationError as exc:
        first = exc.errors()[0]
        place = ".".join(str(p) for p in first["loc"])
        raise RecipeError(f"{place}: {first['msg']}", where=f"{path}: {place}",
                          fix="see docs/tune.md (dmlplug sweep) for the sweep file") from None
    for key, param in params.items():
        if param.type != "categorical":
            raise RecipeError(f"params.\"{key}\" is a {param.type} range; a sweep lists its values",
                              where=f"{path}: params.\"{key}\"", fix='use type = "categorical" and choices = [...]')
        if key == SEED_KEY:
            raise RecipeError(f"{SEED_KEY} is swept by the seeds, not as a parameter", where=f"{path}: {key}",
                              fix="list the seeds in [sweep] seeds or --seeds")
    chosen = parse_seeds(seeds) if seeds is not None else list(spec.sweep.seeds)
    if not chosen or min(chosen) < 0:
        raise RecipeError("the sweep has no seeds", where=f"{path}: sweep.seeds", fix="e.g. seeds = [0, 1, 2]")
    space = SearchSpace(path, spec.recipe, params)
    if not space.recipe_path.is_file():
        raise RecipeError(f"the sweep's recipe {spec.recipe} does not exist (looked for {space.recipe_path})",
                          where=f"{path}: recipe", fix="give the recipe path relative to the sweep file")
    declared: list[str] = []
    for key, param in params.items():
        for other in param.when:
            if other not in declared:
                raise RecipeError(f"params.{key}: the condition names {other!r}, which is no parameter declared "
                                  "before it", where=f"{path}: params.{key}.when",
                                  fix="declare the parameter of the condition first")
        declared.append(key)
    validated = dmlplug.validate(str(space.recipe_path), list(overrides))  # the recipe as every run trains it
    command_line = SearchSpace(path, spec.recipe, from_cli)
    command_line.path = Path("--grid")  # the values came from the command line: name it in the messages
    check_space(command_line, list(overrides))
    check_space(space, list(overrides))  # the file's keys (with their conditions, which may name --grid keys)
    metric = spec.sweep.metric or str(validated.recipe.evaluation.metric)
    return Grid(space, sorted(set(chosen)), metric, str(validated.recipe.evaluation.mode), list(overrides))


def prepare(grid: Grid, sweep_dir: str | Path, storage: str | None, study: str | None = None) -> tuple[Path, Any]:
    """Check the directory, open the study, write the manifest; returns ``(directory, study)``.

    The study is called ``study``, else what the manifest records, else ``dmlplug-sweep``.

    Raises:
        RunError: The directory holds another sweep, something else, or another study's runs, or the storage
            cannot be reached.
    """
    from dmlplug.files import claim_directory, withdraw, write_json
    from dmlplug_builtins.tune.grid import open_grid_study
    from dmlplug_builtins.tune.study import resolve_study_name

    directory = Path(sweep_dir)
    manifest_path = directory / MANIFEST
    identity = grid.identity()
    name = resolve_study_name(manifest_path, study, STUDY)
    fresh = claim_directory(directory, MANIFEST, {"format": FORMAT, "identity": identity}, what="sweep",
                            option="--dir", compare={"format": "kind of sweep (manifest format)",
                                                     "identity": "recipe or --set overrides"}) is None
    # The manifest first: workers starting together on a new --dir see whose directory it is.
    write_json(manifest_path, {"format": FORMAT, "recipe": str(grid.recipe_path), "overrides": grid.overrides,
                               "identity": identity, "metric": grid.metric, "mode": grid.mode, "study": name})
    try:
        return directory, open_grid_study(directory, storage, name, identity)
    except RunError:
        if fresh:  # nothing of this sweep exists: leave no manifest naming a study it never had
            withdraw(directory, [MANIFEST])
        raise


def run_cell_factory(directory: Path, grid: Grid, device: str | None, runner: Any = None) -> Callable[[Any], Any]:
    """The training of one cell: ``runner(recipe, overrides + values + run.seed, out=runs/<slug>/seed-S)``."""
    import dmlplug
    from dmlplug_builtins.tune.trials import toml_value

    train = runner or dmlplug.run

    def run_cell(cell: Any) -> dict[str, float]:
        out = directory / cell.name
        results = out / "results.json"
        if results.is_file():
            data = json.loads(results.read_text(encoding="utf-8"))
            if data.get("status") == "completed":  # trained before its trial was told (a crash in between)
                return {k: float(v) for k, v in data.get("metrics", {}).items()}
        if out.exists():
            shutil.rmtree(out)  # an unfinished run of this cell (its worker died): ours to replace
        values = [f"{k}={toml_value(v)}" for k, v in cell.values.items()]
        result = train(str(grid.recipe_path), [*grid.overrides, *values], out=out, device=device, quiet=True)
        return {k: float(v) for k, v in dict(getattr(result, "metrics", {}) or {}).items()}

    return run_cell


def sweep(target: str | Path, sweep_dir: str | Path, *, grid: Sequence[str] = (), seeds: str | None = None,
          storage: str | None = None, overrides: Sequence[str] = (), device: str | None = None,
          worker: bool = False, echo: Callable[[str], None] = print, runner: Any = None,
          study_name: str | None = None) -> Any:
    """Train every (configuration, seed) of the grid that no worker trained yet; returns the :class:`GridProgress`.

    Without ``worker`` the command also waits for other workers' runs to end (and recovers lost ones).
    ``study_name`` names the study in its storage (see :func:`prepare`).
    """
    from dmlplug_builtins.tune.grid import tally, work

    checked = load_grid(target, grid, seeds, overrides)
    directory, study = prepare(checked, sweep_dir, storage, study_name)
    cells = checked.cells()
    progress = work(study, cells, run_cell_factory(directory, checked, device, runner), wait=not worker, echo=echo)
    counts = tally(study, cells)
    echo(f"sweep {directory}: {len(cells)} runs ({len(checked.configurations())} configurations x "
         f"{len(checked.seeds)} seeds): {counts['complete']} complete, {counts['failed']} failed, "
         f"{counts['running']} running elsewhere, {counts['waiting']} waiting; this process trained "
         f"{len(progress.trained)}")
    return progress
