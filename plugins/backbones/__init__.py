"""Backbones from timm: any timm model name, with DML options (frozen BatchNorm, pooling, local weights).

This module holds the Params, the factory and the registration hook and stays torch-free; the backbone
module is :class:`.timm_backbone.TimmBackbone`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

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
