"""Loading a recipe: read the TOML, apply overrides and variables, validate every section and component.

:func:`load_recipe` is the one entry point; it resolves component names against the registry it is
given (the process-wide plugin host's only when none is given) and hands that same registry to every
nested validation.
"""

from __future__ import annotations

import copy
import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from dmlplug.errors import ComponentError, DmlplugError, RecipeError, did_you_mean
from dmlplug.needs import EngineNeeds
from dmlplug.params import NoParams, Params
from dmlplug.recipe.capabilities import check_capabilities, collect_needs
from dmlplug.recipe.checks import check_recipe, evaluator_metric_names
from dmlplug.recipe.mistakes import Mistakes, RecipeMistakes
from dmlplug.recipe.overrides import apply_overrides, blame_override, interpolate, set_path
from dmlplug.recipe.schema import ENGINE_OPTIONS, SECTION_KIND, Recipe
from dmlplug.recipe.secret_values import refuse_credentials
from dmlplug.recipe.structure import structure_error, structure_items, validate_structure
from dmlplug.registry import ComponentInfo, format_validation_error, singular
from dmlplug.tables import ComponentTable, drop_none, validate_table

if TYPE_CHECKING:
    from dmlplug.context import BuildContext
    from dmlplug.evaluation.rerank_spec import RerankSpec
    from dmlplug.registry import Registry


class ComponentSpec:
    """One validated recipe section: its :class:`~dmlplug.tables.ComponentTable` and engine-level options.

    Attributes:
        path: Recipe path of the table (``"loss"``, ``"data.dataset"``, ``"regularizers[0]"`` …).
        table: The validated component table (registry entry and params).
        options: The table's engine keys, validated by the section's model of
            :data:`~dmlplug.recipe.schema.ENGINE_OPTIONS` (``spec.options.weight``); a ``NoParams`` for a
            section without engine keys.
    """

    def __init__(self, path: str, table: ComponentTable, options: Params | None = None):
        self.path = path
        self.table = table
        self.options = options if options is not None else NoParams()

    @property
    def info(self) -> ComponentInfo:
        """The component's registry entry."""
        return self.table.info

    @property
    def params(self) -> Params:
        """The validated parameters."""
        return self.table.params

    @property
    def name(self) -> str:
        """Registered name of the component."""
        return self.table.name

    def build(self, ctx: BuildContext) -> Any:
        """Build the component (the one build path: :meth:`ComponentTable.build`)."""
        return self.table.build(ctx)

    def to_table(self) -> dict[str, Any]:
        """The resolved table: name, engine options and every parameter (defaults filled in)."""
        # An empty string option means "not set" (e.g. [loss] embedding) and is left out, like None.
        options = {k: v for k, v in drop_none(self.options.model_dump(mode="json")).items() if v != ""}
        resolved = self.table.to_dict()
        return {"name": resolved.pop("name"), **options, **resolved}


class ValidatedRecipe:
    """A recipe whose every section and component has been checked.

    Attributes:
        recipe: The structural :class:`~dmlplug.recipe.schema.Recipe`.
        components: Component specs by path (``"loss"``, ``"regularizers[0]"`` …).
        source: Where the recipe came from (file path or ``"<dict>"``).
        needs: The engine services the components require (:class:`~dmlplug.needs.EngineNeeds`), computed
            once while the recipe is loaded; read-only.
        rerank: The re-rankers of ``[evaluation] rerank``, validated in the recipe's registry.
    """

    def __init__(self, recipe: Recipe, components: dict[str, ComponentSpec], source: str,
                 needs: EngineNeeds | None = None, rerank: list[RerankSpec] | None = None):
        self.recipe = recipe
        self.components = components
        self.source = source
        self._needs = needs
        self.rerank = rerank or []

    @property
    def needs(self) -> EngineNeeds:
        """The engine services the components require, collected on first use and kept.

        Raises:
            RecipeError: A component requires an unknown engine service (only on first use; ``load_recipe``
                always makes that first use).
        """
        if self._needs is None:
            self._needs = collect_needs(self.components, self.source)
        return self._needs

    def component(self, path: str) -> ComponentSpec | None:
        """The spec at ``path`` or None."""
        return self.components.get(path)

    def list_components(self, prefix: str) -> list[ComponentSpec]:
        """Specs of a list section (``"regularizers"``, ``"evaluators"``, ``"loggers"``) in order."""
        return [spec for path, spec in self.components.items() if path.startswith(prefix + "[")]

    def metric_names(self) -> list[str]:
        """Every metric name ``[evaluation] metric`` may be: the evaluators' names, then their re-ranked variants.

        The one list ``dmlplug validate`` checks ``[evaluation] metric`` against; tools that select on a metric of
        the recipe (``dmlplug tune``'s ``[tune] metric``) read it here rather than keeping a list of their own.
        """
        return evaluator_metric_names(self)

    def resolved(self) -> dict[str, Any]:
        """The fully resolved recipe as a TOML-ready dict (defaults filled in, components expanded)."""
        data = drop_none(self.recipe.model_dump(mode="json"))
        for path, spec in self.components.items():
            table: Any = spec.to_table()
            if path == "data.augment" and isinstance(self.recipe.data.augment, str) and list(table) == ["name"]:
                table = table["name"]  # written as a bare name (augment = "dml"), it stays one
            set_path(data, path, table)
        return data

    def dumps(self) -> str:
        """The resolved recipe as TOML text."""
        import tomli_w

        return tomli_w.dumps(self.resolved())


def load_recipe(
    source: str | Path | dict[str, Any],
    overrides: list[str] | dict[str, Any] | None = None,
    *,
    registry: Registry,
    environ: dict[str, str] | None = None,
) -> ValidatedRecipe:
    """Parse, interpolate, override and validate a recipe.

    Args:
        source: Path to a TOML file, or a dict with the recipe's structure.
        overrides: ``"a.b=value"`` strings (value parsed as TOML, else taken as a string) or a dict.
        registry: Registry to resolve component names, also used for nested component tables (the command's
            plugin host's: ``dmlplug.validate`` passes the process-wide one).
        environ: Environment used for ``${VAR}`` / ``${VAR:-default}`` interpolation (default os.environ).

    Raises:
        RecipeError: Syntax error, unknown key, wrong type or value, unset variable.
        RecipeError: Also a mistake found by :func:`~dmlplug.recipe.checks.check_recipe` (selection metric,
            validation split, batch size, optimizer group names).
        ComponentError: Unknown component name.
        RecipeMistakes: Several of these at once (a :class:`RecipeError` listing each with its own where and fix,
            :mod:`dmlplug.recipe.mistakes`); a single mistake is raised as itself.
    """
    raw, where = _read(source)
    apply_overrides(raw, overrides)
    try:
        return _validate(raw, where, registry, os.environ if environ is None else environ)
    except RecipeMistakes as exc:
        for mistake in exc.mistakes:
            blame_override(mistake, overrides)
        exc.refresh()
        raise
    except DmlplugError as exc:
        # An error about a key that an override set points at the override, not at the recipe file.
        blame_override(exc, overrides)
        raise


def _validate(raw: dict[str, Any], where: str, registry: Any, environ: Any) -> ValidatedRecipe:
    """Interpolate and validate the overridden raw recipe (:func:`load_recipe` after reading it).

    Every mistake is reported in one error (:mod:`dmlplug.recipe.mistakes`): the structure's, then every component
    table's, each validated whatever the others gave; the checks across tables run once every table is valid
    (they read them all), so a recipe with a misspelt component name is checked across tables on the next run.
    """
    raw = interpolate(raw, environ, where)
    refuse_credentials(raw, where)  # the resolved recipe is written into the run directory and every checkpoint
    recipe, structure = validate_structure(raw)
    if recipe is None:  # a required section missing or unusable: no table can be read from the recipe
        raise structure_error(structure, where)
    mistakes = Mistakes()
    components = _validate_components(recipe, registry, where, mistakes)
    rerank: list[RerankSpec] = []
    with mistakes.collect():
        rerank = _validate_rerank(recipe, registry)
    if structure and not mistakes:
        raise structure_error(structure, where)  # as it always read: every structural mistake in one message
    mistakes.found[:0] = structure_items(structure, where)
    mistakes.raise_if_any(where, skipped="the checks across sections (selection metric, splits, batch size, "
                                         "capabilities)")
    # The needs are computed once (the engine and BuildContext.needs reuse them); the checks across tables read them,
    # so a component requiring an unknown engine service stops the validation here.
    validated = ValidatedRecipe(recipe, components, where, needs=collect_needs(components, where), rerank=rerank)
    with mistakes.collect():
        check_capabilities(validated, where)
    with mistakes.collect():
        # What components can tell from their parameters: metric names, validation split, batch size, groups.
        check_recipe(validated, where)
    mistakes.raise_if_any(where)
    return validated


def _read(source: str | Path | dict[str, Any]) -> tuple[dict[str, Any], str]:
    # A private copy either way: overrides change it in place.
    if isinstance(source, dict):
        return copy.deepcopy(source), "<dict>"
    path = Path(source)
    where = str(path)
    if not path.is_file():
        raise RecipeError(f"recipe file not found: {path}", fix="check the path; recipes live in recipes/")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")), where
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"TOML syntax error: {exc}", where=where,
                          fix="fix the line and column named above") from None
    except UnicodeDecodeError as exc:
        raise RecipeError(f"recipe is not UTF-8 text: {exc}", where=where) from None


def _validate_components(recipe: Recipe, registry: Any, where: str, mistakes: Mistakes) -> dict[str, ComponentSpec]:
    """Every component table of ``recipe`` validated; each mistake is recorded in ``mistakes`` and the next goes on."""
    tables: list[tuple[str, dict[str, Any]]] = [
        ("data.dataset", recipe.data.dataset),
        ("data.sampler", recipe.data.sampler),
        ("backbone", recipe.backbone),
        ("head", recipe.head),
        ("loss", recipe.loss),
    ]
    if recipe.miner is not None:
        tables.append(("miner", recipe.miner))
    for section in ("regularizers", "evaluators", "loggers"):
        for i, table in enumerate(getattr(recipe, section)):
            tables.append((f"{section}[{i}]", table))
    specs: dict[str, ComponentSpec] = {}
    # [optimizer] and [scheduler] hold their engine options and the component's parameters side by side.
    tables.append(("optimizer", {"name": recipe.optimizer.name, **recipe.optimizer.model_dump(exclude={"name"})}))
    tables.append(("scheduler", {"name": recipe.scheduler.name, **(recipe.scheduler.model_extra or {})}))
    augment = recipe.data.augment
    if augment != "auto":  # "auto" names the dataset's default_augment, known once the dataset is built
        tables.append(("data.augment", {"name": augment} if isinstance(augment, str) else augment))
    for path, table in tables:
        kind = SECTION_KIND[path.split("[")[0]]
        with mistakes.collect():
            specs[path] = _validate_component(path, kind, table, registry, where)
    with mistakes.collect():
        _check_unique_names(specs, where)
    return specs


def _validate_rerank(recipe: Recipe, registry: Any) -> list[RerankSpec]:
    if not recipe.evaluation.rerank:
        return []
    from dmlplug.evaluation.rerank_spec import parse_rerank_list

    return parse_rerank_list(recipe.evaluation.rerank, "evaluation.rerank", registry=registry)


def _validate_component(path: str, kind: str, table: dict[str, Any], registry: Any, where: str) -> ComponentSpec:
    if not isinstance(table, dict):
        raise RecipeError(f"{path} must be a table with a `name` key", where=where)
    table = dict(table)
    name = table.pop("name", None)
    if not isinstance(name, str) or not name:
        raise RecipeError(f"{path}: missing `name` of the {singular(kind)}",
                          where=where, fix=f'add name = "..." (see `dmlplug list {kind}`)')
    options_model = ENGINE_OPTIONS.get(path.split("[")[0])
    options = None
    if options_model is not None:
        engine = {key: table.pop(key) for key in list(table) if key in options_model.model_fields}
        options = _validate_options(options_model, engine, path, where)
    try:
        info = registry.get(kind, name)
    except ComponentError as exc:
        raise ComponentError(exc.what, where=f"{where}: {path}.name", fix=exc.fix) from None
    _check_misspelt_engine_keys(options_model or NoParams, info, table, path, where)
    # The recipe's registry travels as validation context, so nested component tables resolve in it too.
    return ComponentSpec(path, validate_table(kind, {"name": info.name, **table}, where=path, registry=registry),
                         options)


def _validate_options(model: type[Params], raw: dict[str, Any], path: str, where: str) -> Params:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise RecipeError(f"invalid engine options of {path}:\n" + format_validation_error(exc, path, model),
                          where=where, fix="see docs/recipes.md for the engine's keys of each section") from None


def _check_misspelt_engine_keys(model: type[Params], info: ComponentInfo, table: dict[str, Any], path: str,
                                where: str) -> None:
    # A key the component does not take but that looks like an engine key ([optimizer] lrr) or like `name`
    # ([scheduler] nmae, which would otherwise leave the default schedule) gets the suggestion the component's
    # own "unknown key" message could not make.
    keys = ["name", *model.model_fields]
    for key in table:
        hint = did_you_mean(key, keys) if key not in info.params.model_fields else ""
        if hint:
            raise RecipeError(f"{path}.{key}: unknown key{hint}", where=where,
                              fix=f"the keys of {path} besides the component's: " + ", ".join(keys)
                                  + f"; see `dmlplug list {info.kind} --params` for those of {info.name!r}")


def _check_unique_names(specs: dict[str, ComponentSpec], where: str) -> None:
    # Regularizer terms are logged and grouped by name: two of the same name would collide.
    seen: dict[str, str] = {}
    for path, spec in specs.items():
        if path.startswith("regularizers["):
            if spec.name in seen:
                raise RecipeError(f"regularizer {spec.name!r} appears twice ({seen[spec.name]} and {path})",
                                  where=where, fix="combine them into one table")
            seen[spec.name] = path
