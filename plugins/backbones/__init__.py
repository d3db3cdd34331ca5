"""Backbones from timm: any timm model name, with DML options (frozen BatchNorm, pooling, local weights).

This module holds the Params, the factory and the registration hook and stays torch-free; the backbone
module is :class:`.timm_backbone.TimmBackbone`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from dmlplug import BuildContext, Params, hookimpl


class TimmParams(Params):
    """Parameters of the ``timm`` backbone."""

    model: str = Field("resnet50", description="Any timm model name (`timm.list_models()`).")
    pretrained: bool | str = Field(
        False,
        description="false = random init; a path = load that local weights file; true = timm's local cache "
        "only (nothing is ever downloaded).",
    )
    pool: Literal["avg", "max", "avgmax"] = Field(
        "avg", description="Global pooling of the feature map: average, max, or their sum (avg+max)."
    )
    frozen_bn: bool = Field(
        False, description="Keep BatchNorm in eval mode (running stats frozen; affine params still train)."
    )
    in_chans: int = Field(3, ge=1, description="Input channels.")

    @field_validator("model")
    @classmethod
    def _known_model(cls, name: str) -> str:
        problem = unknown_timm_model(name)
        if problem:
            raise ValueError(problem)
        return name

    def extra_tags(self) -> tuple[str, ...]:
        """``"feature_map"`` unless ``model`` is a token model (ViT family), judged from its name.

        Lets ``dmlplug validate`` reject a component that needs the spatial map without importing timm;
        the engine checks the real output again at the first training step.
        """
        name = self.model.lower()
        return () if name.startswith(_TOKEN_MODEL_PREFIXES) else ("feature_map",)


#: timm model families whose features are tokens (B×N×C), i.e. without a spatial feature map.
_TOKEN_MODEL_PREFIXES = (
    "vit", "deit", "beit", "eva", "cait", "xcit", "mixer", "resmlp", "gmlp", "flexivit", "crossvit", "tnt",
    "convit", "volo", "sequencer", "samvit", "naflexvit", "vitamin", "levit", "pit_",
)


def unknown_timm_model(name: str) -> str | None:
    """Why ``name`` is no timm model, judged from the installed timm's names; ``None`` when it is one.

    The names come from the JSON file stored for the installed timm version (:mod:`.timm_names`), so that
    ``dmlplug validate`` rejects a typo without importing timm or torch. When no file matches the installed
    version, they are read from the installed timm itself: that **imports timm (and torch)**, once per process.
    A pretrained tag (``resnet50.a1_in1k``) is allowed; Hugging Face / local-dir names (``hf-hub:…``) are not
    judged here, nor is anything when timm is not installed (or cannot be imported): the factory checks against
    timm itself when it builds the model.
    """
    from dmlplug.errors import did_you_mean
    from dmlplug_builtins.backbones.timm_names import known_names

    if ":" in name:
        return None
    try:
        names = known_names()
    except ImportError:  # a broken timm install: left to the factory, which reports the import error
        return None
    if names is None:  # timm is not installed
        return None
    arch = name.split(".", 1)[0]
    if arch in names.models or arch in names.deprecated:
        return None
    hint = did_you_mean(arch, names.models) or (" (e.g. 'resnet50', 'vit_small_patch16_224')")
    return (f"unknown timm model {name!r}{hint}; the names are timm.list_models() of timm {names.version}, "
            "e.g. `python -c \"import timm; print(timm.list_models('*resnet*'))\"`")


def build_timm(params: TimmParams, ctx: BuildContext) -> Any:
    """Build a timm feature extractor returning ``(pooled features, feature map)``."""
    from dmlplug_builtins.backbones.timm_backbone import TimmBackbone, check_model_name, create_model

    check_model_name(params.model)
    model = create_model(params.model, params.pretrained, params.in_chans)
    return TimmBackbone(model, pool=params.pool, frozen_bn=params.frozen_bn)


@hookimpl
def register_backbones(register: Any) -> None:
    """Register the timm backbone family."""
    register("timm", build_timm, params=TimmParams, tags=("features",),
             description="Any timm model as a feature extractor (pooling, frozen BN, local weights).")
