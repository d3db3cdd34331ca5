"""Backbones from timm: any timm model name, with DML options (frozen BatchNorm, pooling, local weights).

This module holds the Params, the factory and the registration hook and stays torch-free; the backbone
module is :class:`.timm_backbone.TimmBackbone`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from dmlplug import Params, hookimpl


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

    def optimizer_group_names(self, section: str) -> tuple[str, ...]:
        """The backbone's parameters form one group, named after its section (``backbone``)."""
        return (section,)


#: timm model families whose features are tokens (B×N×C), i.e. without a spatial feature map.
_TOKEN_MODEL_PREFIXES = (
    "vit", "deit", "beit", "eva", "cait", "xcit", "mixer", "resmlp", "gmlp", "flexivit", "crossvit", "tnt",
    "convit", "volo", "sequencer", "samvit", "naflexvit", "vitamin", "levit", "pit_",
)


def _installed_timm() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("timm")
    except PackageNotFoundError:
        return None


def unknown_timm_model(name: str) -> str | None:
    """Why ``name`` is no timm model, judged from the stored names (:mod:`.timm_models`); ``None`` when it is one.

    Torch- and timm-free, so ``dmlplug validate`` can reject a typo. A pretrained tag (``resnet50.a1_in1k``) is
    allowed; Hugging Face / local-dir names (``hf-hub:…``) and an installed timm other than the one the names
    were read from are not judged here: the factory checks against timm itself when it builds the model.
    """
    from dmlplug.errors import did_you_mean
    from dmlplug_builtins.backbones.timm_models import DEPRECATED, MODELS, TIMM_VERSION

    if ":" in name or _installed_timm() != TIMM_VERSION:
        return None
    arch = name.split(".", 1)[0]
    if arch in MODELS or arch in DEPRECATED:
        return None
    hint = did_you_mean(arch, MODELS) or (" (e.g. 'resnet50', 'vit_small_patch16_224')")
    return (f"unknown timm model {name!r}{hint}; the names are timm.list_models() of timm {TIMM_VERSION}, "
            "e.g. `python -c \"import timm; print(timm.list_models('*resnet*'))\"`")


def build_timm(params: TimmParams, ctx: Any) -> Any:
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
