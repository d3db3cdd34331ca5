"""TOML recipes: parse, interpolate, override, validate, dump.

A recipe is validated completely before anything heavy is imported: structure and types of every
section, every component name against the registry, every component's parameters against its
:class:`~dmlplug.params.Params` model, and the capabilities components require from each other.
"""

from __future__ import annotations

import copy
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from dmlplug.errors import ComponentError, RecipeError, did_you_mean
from dmlplug.params import Params
from dmlplug.registry import singular

# ----------------------------------------------------------------------------------------------
# Sections


class RunSection(Params):
    """``[run]``: what the run is called, how long it trains and where it runs."""

    name: str = Field("run", min_length=1, description="Run name; the run directory is <output_dir>/<name>/<time>.")
    seed: int = Field(0, ge=0, description="Seed for python, numpy, torch and DataLoader workers.")
    epochs: int = Field(10, ge=0, description="Training epochs (0 = evaluate the untrained model only).")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto = cuda when available, else cpu.")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="Autocast precision on CUDA (bf16/fp16); CPU runs always use fp32."
    )
    output_dir: str = Field("runs", description="Parent folder of run directories.")
    grad_clip: float | None = Field(None, gt=0, description="Clip the gradient norm to this value (None = off).")
    log_every: int = Field(10, ge=1, description="Write training losses to loggers every N steps.")
    checkpoint_every_steps: int | None = Field(
        None, ge=1, description="Also write checkpoints/last.pt every N optimizer steps inside an epoch, so that "
        "--resume continues exactly mid-epoch (None = only after each epoch).",
    )
    deterministic: bool = Field(
        False, description="Strict determinism on GPU: torch.use_deterministic_algorithms, deterministic cuDNN "
        "(slower; CPU runs are deterministic already).",
    )
    compile: bool = Field(False, description="torch.compile the model for training (worth it on CUDA).")
    channels_last: bool = Field(
        False, description="Channels-last memory format for the model and its inputs (faster convolutions on CUDA).",
    )


class DataSection(Params):
    """``[data]``: dataset, sampler and loading."""

    dataset: dict[str, Any] = Field(description="Dataset component table: name + its parameters.")
    sampler: dict[str, Any] = Field(
        default_factory=lambda: {"name": "m_per_class", "m": 4},
        description="Batch sampler component table: name + its parameters.",
    )
    batch_size: int = Field(64, ge=2, description="Training batch size.")
    eval_batch_size: int = Field(256, ge=1, description="Batch size when embedding images for evaluation.")
    workers: int = Field(0, ge=0, description="DataLoader worker processes.")
    image_size: int = Field(224, ge=8, description="Side length of the network input.")
    resize_size: int | None = Field(None, ge=8, description="Shorter-side resize before the test centre crop.")
    augment: Literal["auto", "dml", "light", "none"] = Field(
        "auto", description="Training augmentation; auto = what the dataset suits."
    )
    train_classes: list[str] | None = Field(
        None, description="Re-split the dataset by class name: these classes (from all its images) train.")
    test_classes: list[str] | None = Field(
        None, description="With train_classes: the test classes (labels follow the list order).")
    val_classes: list[str] | None = Field(
        None, description="With train_classes: optional validation classes.")
    split_file: str | None = Field(
        None, description="ooDML split file (JSON from `dmlplug oodml splits`, or a published .pkl): train "
                          "and test on the classes of split split_id.")
    split_id: int | None = Field(None, ge=1, description="Id of the split in split_file.")
    split_part: Literal["zero_shot", "few_shot_base"] = Field(
        "zero_shot", description="zero_shot: train on the split's train classes; few_shot_base: train on its "
                                 "split_train classes and validate on split_val (few-shot base models).")

    @model_validator(mode="after")
    def _class_selection(self) -> DataSection:
        if self.split_file is not None and self.train_classes is not None:
            raise ValueError("give either split_file/split_id or train_classes/test_classes, not both")
        if (self.split_file is None) != (self.split_id is None):
            raise ValueError("split_file and split_id go together")
        if (self.train_classes is None) != (self.test_classes is None):
            raise ValueError("train_classes and test_classes go together")
        if self.val_classes is not None and self.train_classes is None:
            raise ValueError("val_classes needs train_classes and test_classes")
        return self


class GroupOverride(Params):
    """``[optimizer.groups.<name>]``: learning rate / weight decay of one parameter group."""

    lr: float | None = Field(None, gt=0, description="Absolute learning rate of the group.")
    lr_mult: float | None = Field(None, gt=0, description="Multiplier of the optimizer's lr.")
    weight_decay: float | None = Field(None, ge=0, description="Weight decay of the group.")

    @model_validator(mode="after")
    def _one_lr(self) -> GroupOverride:
        if self.lr is not None and self.lr_mult is not None:
            raise ValueError("give either lr or lr_mult, not both")
        return self


class OptimizerSection(Params):
    """``[optimizer]``: optimizer and per-group overrides."""

    name: Literal["adam", "adamw", "sgd"] = Field("adam", description="Optimizer.")
    lr: float = Field(1e-4, gt=0, description="Base learning rate.")
    weight_decay: float = Field(0.0, ge=0, description="Default weight decay.")
    momentum: float = Field(0.9, ge=0, description="SGD momentum.")
    nesterov: bool = Field(False, description="SGD Nesterov momentum.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="Adam/AdamW betas.")
    groups: dict[str, GroupOverride] = Field(
        default_factory=dict,
        description="Overrides per parameter group: backbone, head, loss, or a regularizer's group name.",
    )


class SchedulerSection(Params):
    """``[scheduler]``: learning-rate schedule, stepped once per epoch (plateau: on the selection metric)."""

    name: Literal["none", "step", "multistep", "cosine", "plateau"] = Field("none", description="Schedule.")
    step_size: int = Field(30, ge=1, description="step: epochs between decays.")
    milestones: list[int] = Field(default_factory=list, description="multistep: epochs at which to decay.")
    gamma: float = Field(0.1, gt=0, description="Decay factor (step, multistep, plateau).")
    warmup_epochs: int = Field(0, ge=0, description="cosine: linear warm-up epochs.")
    min_lr: float = Field(0.0, ge=0, description="cosine/plateau: lower bound of the lr.")
    patience: int = Field(5, ge=0, description="plateau: epochs without improvement before decaying.")


class EvaluationSection(Params):
    """``[evaluation]``: when to evaluate and which metric selects the best checkpoint."""

    every: int = Field(1, ge=1, description="Evaluate every N epochs (and always after the last).")
    initial: bool = Field(True, description="Evaluate the untrained model before training.")
    metric: str = Field("recall@1", description="Metric that selects best.pt.")
    mode: Literal["max", "min"] = Field("max", description="Whether a larger metric is better.")
    split: Literal["test", "val"] = Field("test", description="Split used for model selection.")
    backend: Literal["auto", "faiss", "torch"] = Field("auto", description="kNN backend.")
    memory_budget_mb: int | None = Field(None, ge=16, description="Memory budget of the kNN search.")


class Recipe(Params):
    """A whole recipe. Component sections are tables with a ``name`` and the component's parameters."""

    run: RunSection = Field(default_factory=RunSection, description="Run settings.")
    data: DataSection = Field(description="Data settings.")
    backbone: dict[str, Any] = Field(description="Backbone component table.")
    head: dict[str, Any] = Field(
        default_factory=lambda: {"name": "linear"}, description="Head component table."
    )
    loss: dict[str, Any] = Field(description="Loss component table (+ `weight`).")
    miner: dict[str, Any] | None = Field(None, description="Optional miner component table.")
    regularizers: list[dict[str, Any]] = Field(
        default_factory=list, description="Regularizer tables (+ `weight`)."
    )
    optimizer: OptimizerSection = Field(default_factory=OptimizerSection, description="Optimizer.")
    scheduler: SchedulerSection = Field(default_factory=SchedulerSection, description="LR schedule.")
    evaluation: EvaluationSection = Field(default_factory=EvaluationSection, description="Evaluation.")
    evaluators: list[dict[str, Any]] = Field(
        default_factory=lambda: [{"name": "recall", "k": [1, 2, 4, 8]}, {"name": "map_at_r"}],
        description="Evaluator tables.",
    )
    loggers: list[dict[str, Any]] = Field(
        default_factory=lambda: [{"name": "console"}, {"name": "tensorboard"}], description="Logger tables."
    )


#: Keys of a component table that belong to the engine, not to the component's params.
ENGINE_KEYS: dict[str, dict[str, Any]] = {
    "backbone": {"warmup_epochs": 0},
    # embedding: name of a multi-head model's named embedding the loss and miner train on ("" = the
    # evaluation embedding).
    "loss": {"weight": 1.0, "embedding": ""},
    "regularizers": {"weight": 1.0},
}

SECTION_KIND = {
    "backbone": "backbones",
    "head": "heads",
    "loss": "losses",
    "miner": "miners",
    "regularizers": "regularizers",
    "evaluators": "evaluators",
    "loggers": "loggers",
    "data.dataset": "datasets",
    "data.sampler": "samplers",
}


class ComponentSpec:
    """One validated component table: registry entry, params and engine-level options."""

    def __init__(self, path: str, info: Any, params: Params, options: dict[str, Any]):
        self.path = path
        self.info = info
        self.params = params
        self.options = options

    @property
    def name(self) -> str:
        """Registered name of the component."""
        return self.info.name

    def build(self, ctx: Any) -> Any:
        """Build the component through its factory."""
        return self.info.build(self.params, ctx)

    def to_table(self) -> dict[str, Any]:
        """The resolved table: name, engine options and every parameter (defaults filled in)."""
        # An empty string option means "not set" (e.g. [loss] embedding) and is left out, like None.
        options = {k: v for k, v in self.options.items() if v != ""}
        return {"name": self.info.name, **options, **_drop_none(self.params.model_dump(mode="json"))}


class ValidatedRecipe:
    """A recipe whose every section and component has been checked.

    Attributes:
        recipe: The structural :class:`Recipe`.
        components: Component specs by path (``"loss"``, ``"regularizers[0]"`` …).
        source: Where the recipe came from (file path or ``"<dict>"``).
    """

    def __init__(self, recipe: Recipe, components: dict[str, ComponentSpec], source: str):
        self.recipe = recipe
        self.components = components
        self.source = source

    def component(self, path: str) -> ComponentSpec | None:
        """The spec at ``path`` or None."""
        return self.components.get(path)

    def list_components(self, prefix: str) -> list[ComponentSpec]:
        """Specs of a list section (``"regularizers"``, ``"evaluators"``, ``"loggers"``) in order."""
        return [spec for path, spec in self.components.items() if path.startswith(prefix + "[")]

    def resolved(self) -> dict[str, Any]:
        """The fully resolved recipe as a TOML-ready dict (defaults filled in, components expanded)."""
        data = _drop_none(self.recipe.model_dump(mode="json"))
        for path, spec in self.components.items():
            _set_path(data, path, spec.to_table())
        return data

    def dumps(self) -> str:
        """The resolved recipe as TOML text."""
        import tomli_w

        return tomli_w.dumps(self.resolved())


# ----------------------------------------------------------------------------------------------
# Loading


def load_recipe(
    source: str | Path | dict[str, Any],
    overrides: list[str] | dict[str, Any] | None = None,
    *,
    registry: Any = None,
    environ: dict[str, str] | None = None,
) -> ValidatedRecipe:
    """Parse, interpolate, override and validate a recipe.

    Args:
        source: Path to a TOML file, or a dict with the recipe's structure.
        overrides: ``"a.b=value"`` strings (value parsed as TOML, else taken as a string) or a dict.
        registry: Registry to resolve component names (default: the loaded plugin host's).
        environ: Environment used for ``${VAR}`` / ``${VAR:-default}`` interpolation (default os.environ).

    Raises:
        RecipeError: Syntax error, unknown key, wrong type or value, unset variable.
        ComponentError: Unknown component name.
    """
    if isinstance(source, dict):
        raw, where = copy.deepcopy(source), "<dict>"
    else:
        path = Path(source)
        where = str(path)
        if not path.is_file():
            raise RecipeError(f"recipe file not found: {path}", fix="check the path; recipes live in recipes/")
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise RecipeError(f"TOML syntax error: {exc}", where=where,
                              fix="fix the line and column named above") from None
        except UnicodeDecodeError as exc:
            raise RecipeError(f"recipe is not UTF-8 text: {exc}", where=where) from None
    for override in _parse_overrides(overrides):
        _apply_override(raw, *override)
    raw = _interpolate(raw, os.environ if environ is None else environ, where)
    try:
        recipe = Recipe.model_validate(raw)
    except ValidationError as exc:
        raise RecipeError(
            "invalid recipe:\n" + _format_recipe_error(exc), where=where,
            fix="see docs/recipes.md for every section and key",
        ) from None
    if registry is None:
        from dmlplug.plugins import get_host

        registry = get_host().registry
    components = _validate_components(recipe, registry, where)
    validated = ValidatedRecipe(recipe, components, where)
    check_capabilities(validated, where)
    return validated


def _format_recipe_error(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        path = ".".join(loc)
        if err["type"] == "extra_forbidden":
            model = _model_at(Recipe, loc[:-1])
            known = list(model.model_fields) if model is not None else []
            lines.append(f"  {path}: unknown key{did_you_mean(loc[-1], known)}")
        elif err["type"] == "missing":
            lines.append(f"  {path}: missing (required)")
        else:
            got = err.get("input")
            shown = "" if isinstance(got, dict | list) else f" (got {got!r})"
            lines.append(f"  {path}: {err['msg']}{shown}")
    return "\n".join(lines)


def _model_at(model: type[Params], loc: list[str]) -> type[Params] | None:
    for part in loc:
        field = model.model_fields.get(part)
        if field is None:
            return None
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, Params):
            model = annotation
        else:
            return None
    return model


def _validate_components(recipe: Recipe, registry: Any, where: str) -> dict[str, ComponentSpec]:
    tables: list[tuple[str, str, dict[str, Any]]] = [
        ("data.dataset", "datasets", recipe.data.dataset),
        ("data.sampler", "samplers", recipe.data.sampler),
        ("backbone", "backbones", recipe.backbone),
        ("head", "heads", recipe.head),
        ("loss", "losses", recipe.loss),
    ]
    if recipe.miner is not None:
        tables.append(("miner", "miners", recipe.miner))
    for section in ("regularizers", "evaluators", "loggers"):
        for i, table in enumerate(getattr(recipe, section)):
            tables.append((f"{section}[{i}]", section, table))
    specs: dict[str, ComponentSpec] = {}
    for path, kind, table in tables:
        specs[path] = _validate_component(path, kind, table, registry, where)
    _check_unique_names(specs, where)
    return specs


def _validate_component(path: str, kind: str, table: dict[str, Any], registry: Any, where: str) -> ComponentSpec:
    if not isinstance(table, dict):
        raise RecipeError(f"{path} must be a table with a `name` key", where=where)
    table = dict(table)
    name = table.pop("name", None)
    if not isinstance(name, str) or not name:
        raise RecipeError(f"{path}: missing `name` of the {singular(kind)}",
                          where=where, fix=f'add name = "..." (see `dmlplug list {kind}`)')
    try:
        info = registry.get(kind, name)
    except ComponentError as exc:
        raise ComponentError(exc.what, where=f"{where}: {path}.name", fix=exc.fix) from None
    section = path.split("[")[0]
    options = {}
    for key, default in ENGINE_KEYS.get(section, {}).items():
        value = table.pop(key, default)
        options[key] = _check_engine_option(path, key, value, default, where)
    params = info.validate(table, where=path)
    return ComponentSpec(path, info, params, options)


def _check_engine_option(path: str, key: str, value: Any, default: Any, where: str) -> Any:
    expected = type(default)
    if expected is str:
        if not isinstance(value, str):
            raise RecipeError(f"{path}.{key}: expected a string, got {value!r}", where=where)
        return value
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, expected) or isinstance(value, bool):
        raise RecipeError(f"{path}.{key}: expected {expected.__name__}, got {value!r}", where=where)
    if value < 0:
        raise RecipeError(f"{path}.{key}: must be >= 0, got {value!r}", where=where)
    return value


def _check_unique_names(specs: dict[str, ComponentSpec], where: str) -> None:
    # Regularizer terms are logged and grouped by name: two of the same name would collide.
    seen: dict[str, str] = {}
    for path, spec in specs.items():
        if path.startswith("regularizers["):
            if spec.name in seen:
                raise RecipeError(f"regularizer {spec.name!r} appears twice ({seen[spec.name]} and {path})",
                                  where=where, fix="combine them into one table")
            seen[spec.name] = path


#: Section names used in ``requires`` -> component paths of the recipe.
_REQUIREMENT_SECTIONS = {"dataset": "data.dataset", "sampler": "data.sampler"}

#: Engine services a component may require (plain strings; ``views`` is written ``"views:N"``).
#: ``"multi_head"`` is an older spelling of ``"named_embeddings"``.
ENGINE_SERVICES = ("features", "feature_map", "views", "ema", "named_embeddings", "multi_head")


def component_requires(spec: ComponentSpec) -> frozenset[str]:
    """What a component needs: its registered ``requires`` plus what its parameters add.

    A ``Params`` model may define ``extra_requires()`` returning more requirement strings that depend on
    the chosen values (e.g. S2SD needs the backbone's feature map only when it pools it itself).
    """
    extra = getattr(spec.params, "extra_requires", None)
    return frozenset(spec.info.requires) | (frozenset(extra()) if callable(extra) else frozenset())


def component_tags(spec: ComponentSpec) -> frozenset[str]:
    """What a component offers: its registered ``tags`` plus what its parameters add (``extra_tags()``)."""
    extra = getattr(spec.params, "extra_tags", None)
    return frozenset(spec.info.tags) | (frozenset(extra()) if callable(extra) else frozenset())


class EngineNeeds:
    """The engine services a validated recipe's components require, and who requires them.

    Attributes:
        views: Total number of augmented views of every training image (1 = no extra view).
        by: Service name (``"features"``, ``"feature_map"``, ``"views"``, ``"ema"``, ``"named_embeddings"``)
            -> recipe paths of the components that require it.
    """

    def __init__(self) -> None:
        self.views = 1
        self.by: dict[str, list[str]] = {}

    def __contains__(self, service: str) -> bool:
        return bool(self.by.get(service))

    def add(self, service: str, path: str) -> None:
        """Record that the component at ``path`` requires ``service``."""
        self.by.setdefault(service, []).append(path)


def engine_needs(recipe: ValidatedRecipe, where: str = "") -> EngineNeeds:
    """Collect the engine services required by the recipe's components.

    Raises:
        RecipeError: A requirement names no known engine service or has a malformed view count.
    """
    needs = EngineNeeds()
    for path, spec in recipe.components.items():
        for requirement in sorted(component_requires(spec)):
            section, _, arg = requirement.partition(":")
            if arg and section != "views":
                continue  # "<section>:<tag>": a capability of another component, checked separately
            kind = singular(spec.info.kind)
            if section not in ENGINE_SERVICES:
                raise RecipeError(
                    f"{kind} {spec.name!r} requires unknown engine service {requirement!r}",
                    where=f"{where}: {path} (plugin {spec.info.plugin!r})",
                    fix="engine services are: features, feature_map, views:N, ema, named_embeddings; "
                        "report this to the plugin's author",
                )
            if section == "views":
                if not arg.isdigit() or int(arg) < 1:
                    raise RecipeError(
                        f"{kind} {spec.name!r} requires {requirement!r}: the view count must be an integer >= 1",
                        where=f"{where}: {path} (plugin {spec.info.plugin!r})",
                        fix='write "views:2" for one extra augmented view; report this to the plugin\'s author',
                    )
                needs.views = max(needs.views, int(arg))
            needs.add("named_embeddings" if section == "multi_head" else section, path)
    return needs


def _head_embedding_names(head: ComponentSpec) -> list[str] | None:
    # Heads that name their embeddings in a `heads` table (the built-in `multi`); None = unknown statically.
    heads = getattr(head.params, "heads", None)
    return list(heads) if isinstance(heads, dict) else None


def check_capabilities(recipe: ValidatedRecipe, where: str) -> None:
    """Reject component combinations that cannot work, before anything is built.

    Raises:
        RecipeError: A miner is paired with a loss that ignores mined tuples, a component requires a tag
            another section lacks (``"loss:proxies"``), or an engine service the recipe's backbone, head or
            data cannot give (feature map, named embeddings), or ``[loss] embedding`` names no head output.
    """
    loss = recipe.component("loss")
    miner = recipe.component("miner")
    if miner is not None and loss is not None and "uses_tuples" not in loss.info.tags:
        raise RecipeError(
            f"miner {miner.name!r} is useless with loss {loss.name!r}: the loss ignores mined tuples",
            where=f"{where}: [miner]",
            fix="remove the [miner] section or choose a pair/triplet loss (tag uses_tuples in `dmlplug list losses`)",
        )
    for path, spec in recipe.components.items():
        for requirement in sorted(component_requires(spec)):
            section, _, tag = requirement.partition(":")
            if not tag or section == "views":
                continue  # engine services: checked below
            other_path = _REQUIREMENT_SECTIONS.get(section, section)
            other = recipe.component(other_path)
            if other is None or tag not in component_tags(other):
                have = f"{section} {other.name!r}" if other is not None else f"no [{section}]"
                kind = singular(spec.info.kind)
                raise RecipeError(
                    f"{kind} {spec.name!r} needs a {section} with {tag!r}, but the recipe has {have}",
                    where=f"{where}: {path}",
                    fix=f"choose a {section} tagged {tag!r} "
                    f"(see `dmlplug list {SECTION_KIND.get(other_path, section)}`)",
                )
    _check_engine_services(recipe, where)


def _check_engine_services(recipe: ValidatedRecipe, where: str) -> None:
    needs = engine_needs(recipe, where)
    backbone, head, loss = recipe.component("backbone"), recipe.component("head"), recipe.component("loss")

    def who(service: str) -> str:
        paths = needs.by[service]
        specs = [(p, recipe.components[p]) for p in paths]
        return ", ".join(f"{singular(spec.info.kind)} {spec.name!r} ({p})" for p, spec in specs)

    if "feature_map" in needs and backbone is not None and "feature_map" not in component_tags(backbone):
        raise RecipeError(
            f"{who('feature_map')} needs the backbone's B×F×h×w feature map, but backbone {backbone.name!r} "
            "(with these parameters) gives none",
            where=f"{where}: [backbone]",
            fix="choose a convolutional backbone (e.g. timm model = \"resnet50\"; token models such as ViT have "
                "no spatial map), or switch the option that needs the map off",
        )
    head_named = head is not None and bool({"named_embeddings", "multi_head"} & component_tags(head))
    if "named_embeddings" in needs and not head_named:
        raise RecipeError(
            f"{who('named_embeddings')} needs several named embeddings, but head "
            f"{head.name if head is not None else None!r} gives one",
            where=f"{where}: [head]",
            fix='use a head that gives named embeddings, e.g. [head] name = "multi" with a `heads` table',
        )
    name = loss.options.get("embedding", "") if loss is not None else ""
    if name:
        if not head_named:
            raise RecipeError(
                f"[loss] embedding = {name!r} names a head output, but head {head.name!r} gives a single embedding",
                where=f"{where}: [loss] embedding",
                fix='remove `embedding` from [loss], or use a multi-head head (name = "multi")',
            )
        names = _head_embedding_names(head)
        if names is not None and name not in names:
            raise RecipeError(
                f"[loss] embedding = {name!r} is not an output of head {head.name!r}{did_you_mean(name, names)}",
                where=f"{where}: [loss] embedding",
                fix="choose one of: " + ", ".join(names),
            )


# ----------------------------------------------------------------------------------------------
# Overrides and interpolation

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _interpolate(value: Any, environ: Any, where: str, path: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _interpolate(v, environ, where, f"{path}.{k}" if path else k) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, environ, where, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in environ and environ[name] != "":
                return environ[name]
            if default is not None:
                return default
            raise RecipeError(
                f"environment variable {name} is not set (used in {path})",
                where=where,
                fix=f"export {name}=/path/to/... or write ${{{name}:-default}} in the recipe",
            )

        return _VAR.sub(substitute, value)
    return value


def _parse_overrides(overrides: list[str] | dict[str, Any] | None) -> list[tuple[list[str | int], Any, str]]:
    if not overrides:
        return []
    items = overrides.items() if isinstance(overrides, dict) else [_split_override(o) for o in overrides]
    parsed = []
    for key, value in items:
        parsed.append((_parse_key(key), value, key))
    return parsed


def override_pairs(overrides: list[str] | dict[str, Any] | None) -> dict[str, Any]:
    """Normalise ``--set`` strings or a dict into an ordered ``{key: value}`` dict (later keys win)."""
    if not overrides:
        return {}
    if isinstance(overrides, dict):
        return dict(overrides)
    return dict(_split_override(o) for o in overrides)


def _split_override(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise RecipeError(f"override {text!r} is not of the form section.key=value",
                          fix='e.g. --set run.epochs=3 or --set loss.margin=0.1')
    key, raw_value = text.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw_value}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw_value  # bare strings need no quotes on the command line
    return key.strip(), value


def _parse_key(key: str) -> list[str | int]:
    parts: list[str | int] = []
    for token in re.split(r"\.(?![^\[]*\])", key.replace("[", ".[")):
        if not token:
            continue
        match = re.fullmatch(r"\[(\d+)\]", token)
        if match:
            parts.append(int(match.group(1)))
        elif token.isdigit():
            parts.append(int(token))
        else:
            parts.append(token)
    if not parts:
        raise RecipeError(f"empty override key {key!r}")
    return parts


def _apply_override(raw: dict[str, Any], parts: list[str | int], value: Any, key: str) -> None:
    node: Any = raw
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                raise RecipeError(f"override {key!r}: index {part} does not exist",
                                  fix="list sections are indexed from 0, e.g. regularizers.0.weight=2")
            node = node[part]
        else:
            if not isinstance(node, dict):
                raise RecipeError(f"override {key!r}: {part!r} is not inside a table")
            if part not in node:
                node[part] = [] if isinstance(nxt, int) else {}
            node = node[part]
    last = parts[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise RecipeError(f"override {key!r}: index {last} does not exist")
        node[last] = value
    elif not isinstance(node, dict):
        raise RecipeError(f"override {key!r}: cannot set a key inside a non-table value")
    else:
        node[last] = value


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    parts = _parse_key(path)
    node: Any = data
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value


def _drop_none(value: Any) -> Any:
    # TOML has no null: unset optional values are simply left out of the resolved recipe.
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value if v is not None]
    return value
