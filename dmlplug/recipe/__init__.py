"""TOML recipes: parse, interpolate, override, validate, dump.

A recipe is validated completely before anything heavy is imported: structure and types of every
section, every component name against the registry, every component's parameters against its
:class:`~dmlplug.params.Params` model, and the capabilities components require from each other.

One concern per module:

* :mod:`~dmlplug.recipe.schema`: the section models (:class:`Recipe`, :class:`RunSection` …) and
  :data:`ENGINE_OPTIONS`.
* :mod:`~dmlplug.recipe.loading`: :func:`load_recipe`, :class:`ValidatedRecipe`, :class:`ComponentSpec`.
* :mod:`~dmlplug.recipe.overrides`: ``--set`` overrides and ``${VAR}`` interpolation.
* :mod:`~dmlplug.recipe.capabilities`: tags, requirements and engine services
  (:func:`check_capabilities`, :func:`collect_needs`).
"""

from dmlplug.needs import EngineNeeds
from dmlplug.recipe.capabilities import (
    ENGINE_SERVICES,
    check_capabilities,
    collect_needs,
    component_requires,
    component_tags,
)
from dmlplug.recipe.loading import ComponentSpec, ValidatedRecipe, load_recipe
from dmlplug.recipe.overrides import apply_overrides, interpolate, override_pairs
from dmlplug.recipe.schema import (
    ENGINE_OPTIONS,
    SECTION_KIND,
    DataSection,
    EvaluationSection,
    GroupOverride,
    OptimizerSection,
    Recipe,
    RunSection,
    SchedulerSection,
)

__all__ = [
    "ENGINE_OPTIONS",
    "ENGINE_SERVICES",
    "SECTION_KIND",
    "ComponentSpec",
    "DataSection",
    "EngineNeeds",
    "EvaluationSection",
    "GroupOverride",
    "OptimizerSection",
    "Recipe",
    "RunSection",
    "SchedulerSection",
    "ValidatedRecipe",
    "apply_overrides",
    "check_capabilities",
    "collect_needs",
    "component_requires",
    "component_tags",
    "interpolate",
    "load_recipe",
    "override_pairs",
]
