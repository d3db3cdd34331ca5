"""Search spaces: a ``*.space.toml`` file next to a recipe, its validation, and sampling a trial's overrides.

A space file names its recipe and lists the recipe keys to search, each written as a ``--set`` key::

    recipe = "../quickstart.toml"        # relative to this file

    [tune]                               # the protocol (all optional)
    metric = "map@r"                     # objective: mean over the folds of this validation metric
    folds = 4
    sampler = "tpe"                      # a registered tune sampler (`dmlplug list tune_samplers`), by name ...
    [tune.pruner]                        # ... or as a table with its parameters
    name = "median"
    warmup_epochs = 2

    [params."optimizer.lr"]
    type = "float"
    low = 1e-4
    high = 1e-2
    log = true

    [params."loss.name"]
    type = "categorical"
    choices = ["multi_similarity", "contrastive"]

    [params."loss.pos_margin"]           # only sampled when loss.name is "contrastive"
    type = "float"
    low = 0.0
    high = 0.5
    when = {"loss.name" = "contrastive"}

Validation (:func:`check_space`) happens before anything trains: every key exists in the recipe (looked up with
:func:`dmlplug.recipe_field`, with its conditions applied), its range lies within the field's own bounds, a log
range is positive, every categorical choice (and both ends of a range) validates as a recipe override, and so
does every combination of values the space can draw (:mod:`.combinations`).
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from dmlplug import ComponentTable, TableOf, default_table, read_value
from dmlplug.errors import RecipeError
from dmlplug.params import Params

PRUNE_AT = ("epoch", "fold")
#: ``[tune]`` keys of earlier space files that are now parameters of the sampler or the pruner:
#: old key -> (table, its key there, the built-in components that take it).
MOVED = {"tpe_startup_trials": ("sampler", "startup_trials", ("tpe",)),
         "startup_trials": ("pruner", "startup_trials", ("median", "percentile")),
         "warmup_epochs": ("pruner", "warmup_epochs", ("median", "percentile")),
         "percentile": ("pruner", "percentile", ("percentile",))}


class ParamSpec(Params):
    """One searched recipe key."""

    type: Literal["float", "int", "categorical"] = Field(description="float, int or categorical.")
    low: float | None = Field(None, description="Lower end (float, int).")
    high: float | None = Field(None, description="Upper end, included (float, int).")
    log: bool = Field(False, description="Sample on a log scale (positive ranges only).")
    step: float | None = Field(None, gt=0, description="Discretisation step (float, int).")
    choices: list[Any] | None = Field(None, description="The values of a categorical key.")
    when: dict[str, Any] = Field(default_factory=dict, description="Active only when these categorical keys "
                                 "have this value (or one of a list of values).")

    @model_validator(mode="after")
    def _shape(self) -> ParamSpec:
        if self.type == "categorical":
            if self.choices is None or len(self.choices) == 0:
                raise ValueError("a categorical parameter needs a non-empty choices list")
            if any(not isinstance(c, (str, int, float, bool)) for c in self.choices):
                raise ValueError("categorical choices must be strings, numbers or booleans")
            if self.low is not None or self.high is not None:
                raise ValueError("a categorical parameter has choices, not low/high")
            return self
        if self.choices is not None:
            raise ValueError(f"a {self.type} parameter has low/high, not choices")
        if self.low is None or self.high is None:
            raise ValueError(f"a {self.type} parameter needs low and high")
        if self.low > self.high:
            raise ValueError(f"low = {self.low} is above high = {self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"log = true needs a positive range, low = {self.low}")
        if self.log and self.step is not None:
            raise ValueError("log and step do not go together")
        if self.type == "int" and (self.low != int(self.low) or self.high != int(self.high)):
            raise ValueError("an int parameter needs whole low and high")
        return self

    def active(self, chosen: dict[str, Any]) -> bool:
        """Whether the conditions hold for the values ``chosen`` so far."""
        for key, wanted in self.when.items():
            values = wanted if isinstance(wanted, list) else [wanted]
            if key not in chosen or chosen[key] not in values:
                return False
        return True


class TuneSettings(Params):
    """``[tune]``: the protocol and the engine."""

    metric: str = Field("map@r", description="Validation metric; the objective is its mean over the folds.")
    direction: Literal["maximize", "minimize"] = Field("maximize", description="Whether larger is better.")
    folds: int = Field(4, ge=2, description="Class-disjoint folds of the training classes.")
    fold_seed: int = Field(0, ge=0, description="Seed of the fold assignment.")
    sampler: Annotated[ComponentTable, TableOf("tune_samplers")] = Field(
        default=default_table("tpe"), description="How trials' values are chosen: a registered tune sampler "
        "(`dmlplug list tune_samplers`: tpe, random, cmaes, qmc, grid), by name or as a table with its parameters "
        '({name = "tpe", startup_trials = 20}).')
    sampler_seed: int | None = Field(None, description="Seed of the sampler (None: fresh randomness).")
    pruner: Annotated[ComponentTable, TableOf("tune_pruners")] = Field(
        default=default_table("median"), description="What stops unpromising trials, on the running mean of the "
        "folds: a registered tune pruner (`dmlplug list tune_pruners`: median, percentile, none), by name or as a "
        'table with its parameters ({name = "median", warmup_epochs = 2}).')
    prune_at: Literal[PRUNE_AT] = Field("epoch", description="When the pruner looks: after every validated "  # type: ignore[valid-type]
                                        "epoch, or only when a fold ends (the running mean of whole folds).")

    @field_validator("sampler", "pruner", mode="before")
    @classmethod
    def _name_alone(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value  # sampler = "tpe" is {name = "tpe"}


class SpaceFile(Params):
    """A whole space file."""

    recipe: str = Field(description="The recipe, relative to the space file.")
    # validated from {} so that the default sampler and pruner are looked up in the registry given to load_space
    tune: TuneSettings = Field(default_factory=dict, description="Protocol settings.")  # type: ignore[assignment]
    params: dict[str, ParamSpec] = Field(description="Searched recipe keys.")


class SearchSpace:
    """Searched keys and the recipe they belong to (what :func:`check_space` checks; a sweep's grid is one)."""

    def __init__(self, path: Path, recipe: str, params: dict[str, ParamSpec]):
        self.path = path
        self.params = params
        self.recipe_path = (path.parent / recipe).resolve()


class Space(SearchSpace):
    """A loaded space file: its parameters, the recipe it tunes and its ``[tune]`` settings."""

    def __init__(self, path: Path, spec: SpaceFile):
        super().__init__(path, spec.recipe, spec.params)
        self.settings = spec.tune

    def identity(self, overrides: list[str]) -> str:
        """A hash of what makes trials comparable: recipe text, overrides, protocol and parameters."""
        # how trials are chosen and stopped, not what they measure
        settings = self.settings.model_dump(mode="json", exclude={"sampler", "sampler_seed", "pruner", "prune_at"})
        blob = {"recipe": self.recipe_path.read_text(encoding="utf-8"), "overrides": list(overrides),
                "settings": settings, "params": {k: v.model_dump(mode="json") for k, v in self.params.items()}}
        return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()


def load_space(path: str | Path, *, registry: Any) -> Space:
    """Read and structurally validate a space file.

    Args:
        path: The space file.
        registry: Where ``[tune] sampler`` and ``pruner`` are looked up (the command's registry,
            :meth:`dmlplug.BuildContext.registry`).

    Raises:
        RecipeError: Missing file, invalid TOML, unknown or ill-formed entries (an unknown sampler or pruner
            among them), a ``[tune]`` key that moved into the sampler's or pruner's table, a condition on a key
            that is no earlier categorical parameter, or a missing recipe.
    """
    file = Path(path)
    if not file.is_file():
        raise RecipeError(f"space file not found: {file}", where=str(file), fix="check the path")
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{file} is not valid TOML: {exc}", where=str(file)) from None
    if isinstance(raw.get("tune"), dict):
        _refuse_moved_keys(raw["tune"], file)
    try:
        spec = SpaceFile.model_validate(raw, context={"registry": registry})
    except ValidationError as exc:
        first = exc.errors()[0]
        place = ".".join(str(p) for p in first["loc"])
        message, _, fix = first["msg"].removeprefix("Value error, ").partition("; fix: ")
        raise RecipeError(f"{place}: {message}", where=f"{file}: {place}",
                          fix=fix or "see docs/tune.md for the space format") from None
    if not spec.params:
        raise RecipeError("the space has no [params.\"...\"] entries", where=str(file),
                          fix='add e.g. [params."optimizer.lr"] type = "float" low = 1e-4 high = 1e-2 log = true')
    seen: dict[str, ParamSpec] = {}
    for key, param in spec.params.items():
        for other in param.when:
            if other not in seen or seen[other].type != "categorical":
                raise RecipeError(f"params.{key}: the condition names {other!r}, which is no categorical parameter "
                                  "declared before it", where=f"{file}: params.{key}.when",
                                  fix="declare the categorical parameter first, then the conditional one")
        seen[key] = param
    space = Space(file, spec)
    if not space.recipe_path.is_file():
        raise RecipeError(f"the space's recipe {spec.recipe} does not exist (looked for {space.recipe_path})",
                          where=f"{file}: recipe", fix="give the recipe path relative to the space file")
    return space


def _refuse_moved_keys(tune: dict[str, Any], file: Path) -> None:
    """Raise on ``[tune]`` keys that are now parameters of the sampler or the pruner, saying where each goes."""
    found = [key for key in MOVED if key in tune]
    if not found:
        return
    tables: dict[str, list[str]] = {}
    dropped = []
    for key in found:
        table, moved_to, takers = MOVED[key]
        given = tune.get(table, "tpe" if table == "sampler" else "median")
        name = given.get("name") if isinstance(given, dict) else given
        if name not in takers:  # it never applied to this sampler or pruner
            dropped.append(key)
            continue
        tables.setdefault(table, [f"name = {json.dumps(name)}"]).append(f"{moved_to} = {json.dumps(tune[key])}")
    fixes = [f"write [tune.{table}] " + " ".join(lines) for table, lines in tables.items()]
    if dropped:
        fixes.append("delete " + ", ".join(dropped) + " (the named sampler or pruner never used it)")
    raise RecipeError(f"[tune] {', '.join(found)}: these settings moved into the tables of the sampler and the "
                      "pruner", where=f"{file}: tune.{found[0]}", fix="; ".join(fixes) + " (docs/tune.md)")


def distributions(space: SearchSpace) -> dict[str, Any]:
    """The searched keys as Optuna distributions, as :func:`suggest` samples them (``ctx.search_space``)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    result: dict[str, Any] = {}
    for key, param in space.params.items():
        if param.type == "categorical":
            result[key] = CategoricalDistribution(list(param.choices or ()))
        elif param.type == "int":
            result[key] = IntDistribution(int(param.low or 0), int(param.high or 0), log=param.log,
                                          step=int(param.step) if param.step else 1)
        else:
            result[key] = FloatDistribution(float(param.low or 0), float(param.high or 0), log=param.log,
                                            step=param.step)
    return result


def condition_overrides(space: SearchSpace, key: str) -> dict[str, Any]:
    """Overrides that make ``key`` active: the first value of each of its conditions (recursively)."""
    result: dict[str, Any] = {}
    param = space.params[key]
    for other, wanted in param.when.items():
        result.update(condition_overrides(space, other))
        result[other] = wanted[0] if isinstance(wanted, list) else wanted
    return result


def check_space(space: SearchSpace, overrides: list[str]) -> None:
    """Check every parameter against the recipe, before anything runs.

    Args:
        space: The loaded space.
        overrides: ``--set`` overrides applied to every trial.

    Raises:
        RecipeError: An unknown key, a range outside the field's bounds, a float range on an integer field, a
            value (categorical choice, range end) that the recipe refuses, the message naming the parameter; or a
            combination of values the space can draw that the recipe refuses
            (:func:`~dmlplug_builtins.tune.combinations.check_combinations`).
    """
    import dmlplug
    from dmlplug.errors import DmlplugError
    from dmlplug_builtins.tune.combinations import check_combinations

    base = dict(_pairs(overrides))
    for key, param in space.params.items():
        where = f"{space.path}: params.\"{key}\""
        active = {**base, **condition_overrides(space, key)}
        try:
            found = dmlplug.recipe_field(dmlplug.validate(str(space.recipe_path), active), key)
        except DmlplugError as exc:
            what = exc.what if exc.what.startswith(f"{key}:") else f"{key}: {exc.what}"
            raise RecipeError(what, where=where, fix=exc.fix or "check the key") from None
        if param.type != "categorical":
            _check_bounds(key, param, found, where)
        values = param.choices if param.type == "categorical" else [_typed(param, param.low), _typed(param, param.high)]
        for value in values or []:
            try:
                dmlplug.validate(str(space.recipe_path), {**active, key: value})
            except DmlplugError as exc:
                raise RecipeError(f"{key} = {value!r} is refused by the recipe: {exc.what}", where=where,
                                  fix="remove that value from the space, or narrow the range") from None
    check_combinations(space, base)  # the values together, and every value an int range can draw


def _check_bounds(key: str, param: ParamSpec, found: Any, where: str) -> None:
    if param.type == "float" and found.annotation is int:
        raise RecipeError(f"{key} is an integer field ({found.owner}); a float range cannot set it", where=where,
                          fix='use type = "int"')
    low, high, bounds = param.low, param.high, found.bounds
    assert low is not None and high is not None  # checked by ParamSpec
    problems = []
    if "ge" in bounds and low < bounds["ge"]:
        problems.append(f"low = {low} is below the field's minimum {bounds['ge']}")
    if "gt" in bounds and low <= bounds["gt"]:
        problems.append(f"low = {low} must be above {bounds['gt']}")
    if "le" in bounds and high > bounds["le"]:
        problems.append(f"high = {high} is above the field's maximum {bounds['le']}")
    if "lt" in bounds and high >= bounds["lt"]:
        problems.append(f"high = {high} must be below {bounds['lt']}")
    if problems:
        allowed = ", ".join(f"{name} {value:g}" for name, value in bounds.items())
        raise RecipeError(f"{key}: " + "; ".join(problems) + f" ({found.owner} allows {allowed})", where=where,
                          fix="narrow the range to the field's bounds")


def _typed(param: ParamSpec, value: float | None) -> Any:
    return int(value) if param.type == "int" and value is not None else value


def _pairs(overrides: list[str]) -> list[tuple[str, Any]]:
    pairs = []
    for text in overrides:
        key, sep, value = text.partition("=")
        if not sep:
            raise RecipeError(f"override {text!r} is not of the form section.key=value", where=f"--set {text}")
        pairs.append((key.strip(), read_value(value)))
    return pairs


def suggest(trial: Any, space: SearchSpace) -> dict[str, Any]:
    """Sample a trial's values (inactive conditional parameters are not sampled); returns ``{key: value}``."""
    chosen: dict[str, Any] = {}
    for key, param in space.params.items():
        if not param.active(chosen):
            continue
        if param.type == "categorical":
            chosen[key] = trial.suggest_categorical(key, param.choices)
        elif param.type == "int":
            step = int(param.step) if param.step else 1
            chosen[key] = trial.suggest_int(key, int(param.low or 0), int(param.high or 0), step=step, log=param.log)
        else:
            chosen[key] = trial.suggest_float(key, float(param.low or 0), float(param.high or 0), step=param.step,
                                              log=param.log)
    return chosen
