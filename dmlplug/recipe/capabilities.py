"""Whether a recipe's components can work together: tags, requirements and engine services.

Components declare what they offer (``tags``) and need (``requires``); a requirement is either a tag of
another section (``"loss:proxies"``) or an engine service (``"feature_map"``, ``"views:2"``, ``"ema"`` …).
Everything here reads validated component specs only, so impossible recipes fail at ``dmlplug validate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from dmlplug.errors import RecipeError, did_you_mean
from dmlplug.needs import EngineNeeds
from dmlplug.recipe.schema import SECTION_KIND, LossOptions
from dmlplug.registry import singular

if TYPE_CHECKING:
    from dmlplug.recipe.loading import ComponentSpec, ValidatedRecipe

#: Section names used in ``requires`` -> component paths of the recipe.
_REQUIREMENT_SECTIONS = {"dataset": "data.dataset", "sampler": "data.sampler"}

#: Engine services a component may require (plain strings; ``views`` is written ``"views:N"``).
ENGINE_SERVICES = ("features", "feature_map", "views", "ema", "named_embeddings", "selection_metric")


def component_requires(spec: ComponentSpec) -> frozenset[str]:
    """What a component needs: its registered ``requires`` plus what its parameters add.

    ``Params.extra_requires()`` returns more requirement strings that depend on the chosen values (e.g. S2SD
    needs the backbone's feature map only when it pools it itself).
    """
    return frozenset(spec.info.requires) | frozenset(spec.params.extra_requires())


def component_tags(spec: ComponentSpec) -> frozenset[str]:
    """What a component offers: its registered ``tags`` plus what its parameters add (``extra_tags()``)."""
    return frozenset(spec.info.tags) | frozenset(spec.params.extra_tags())


def collect_needs(components: Mapping[str, ComponentSpec], where: str = "") -> EngineNeeds:
    """Collect the engine services required by ``components`` (recipe path -> spec).

    The loader calls it once per recipe, through :attr:`ValidatedRecipe.needs`.

    Raises:
        RecipeError: A requirement names no known engine service or has a malformed view count.
    """
    needs = EngineNeeds()
    for path, spec in components.items():
        for requirement in sorted(component_requires(spec)):
            section, _, arg = requirement.partition(":")
            if arg and section != "views":
                continue  # "<section>:<tag>": a capability of another component, checked separately
            kind = singular(spec.info.kind)
            if section not in ENGINE_SERVICES:
                raise RecipeError(
                    f"{kind} {spec.name!r} requires unknown engine service {requirement!r}",
                    where=f"{where}: {path} (plugin {spec.info.plugin!r})",
                    fix="engine services are: features, feature_map, views:N, ema, named_embeddings, "
                        "selection_metric; "
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
            needs.add(section, path)
    return needs


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
    _check_engine_services(recipe, recipe.needs, where)


def _check_head_embedding_params(recipe: ValidatedRecipe, head: ComponentSpec, where: str) -> None:
    # Parameters that name head outputs (DiVA's *_head) are declared by Params.head_embeddings().
    names = head.params.head_outputs()
    for path, spec in recipe.components.items():
        for param, name in spec.params.head_embeddings().items():
            if name not in names:
                raise RecipeError(
                    f"{path}.{param} = {name!r} is not an output of head {head.name!r}{did_you_mean(name, names)}",
                    where=f"{where}: {path}.{param}",
                    fix=("choose one of: " + ", ".join(names)) if names else
                        "use a head that gives named embeddings (`dmlplug list heads`)",
                )


def _check_engine_services(recipe: ValidatedRecipe, needs: EngineNeeds, where: str) -> None:
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
    outputs = head.params.head_outputs() if head is not None else ()
    if "named_embeddings" in needs and not outputs:
        raise RecipeError(
            f"{who('named_embeddings')} needs several named embeddings, but head "
            f"{head.name if head is not None else None!r} (with these parameters) gives one",
            where=f"{where}: [head]",
            fix="use a head that declares named outputs (Params.head_outputs()), e.g. [head] name = \"multi\" "
                "with a `heads` table",
        )
    if head is not None:
        _check_head_embedding_params(recipe, head, where)
    name = loss.options.embedding if loss is not None and isinstance(loss.options, LossOptions) else ""
    if name and name not in outputs:
        raise RecipeError(
            f"[loss] embedding = {name!r} is not an output of head "
            f"{head.name if head is not None else None!r}{did_you_mean(name, outputs)}",
            where=f"{where}: [loss] embedding",
            fix=("choose one of: " + ", ".join(outputs)) if outputs else
                "remove `embedding` from [loss], or use a head with named outputs (`dmlplug list heads`)",
        )
