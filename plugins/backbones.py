"""Backbones from timm: any timm model name, with DML options (frozen BatchNorm, pooling, local weights)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field

from dmlplug import Params, hookimpl
from dmlplug.errors import ComponentError


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

    def extra_tags(self) -> set[str]:
        """``"feature_map"`` unless ``model`` is a token model (ViT family), judged from its name.

        Lets ``dmlplug validate`` reject a component that needs the spatial map without importing timm;
        the engine checks the real output again at the first training step.
        """
        name = self.model.lower()
        return set() if name.startswith(_TOKEN_MODEL_PREFIXES) else {"feature_map"}


#: timm model families whose features are tokens (B×N×C), i.e. without a spatial feature map.
_TOKEN_MODEL_PREFIXES = (
    "vit", "deit", "beit", "eva", "cait", "xcit", "mixer", "resmlp", "gmlp", "flexivit", "crossvit", "tnt",
    "convit", "volo", "sequencer", "samvit", "naflexvit", "vitamin", "levit", "pit_",
)


def build_timm(params: TimmParams, ctx):
    """Build a timm feature extractor returning ``(pooled features, feature map)``."""
    import timm
    import torch
    from torch import nn

    if params.model not in timm.list_models() and not timm.is_model(params.model):
        import difflib

        close = difflib.get_close_matches(params.model, timm.list_models(), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ComponentError(f"unknown timm model {params.model!r}{hint}", where="[backbone] model",
                             fix="see timm.list_models() for valid names")
    model = _create(timm, params)

    class TimmBackbone(nn.Module):
        """timm model without classifier; pools its feature map itself so the map is available too."""

        def __init__(self) -> None:
            super().__init__()
            self.body = model
            self.num_features = int(model.num_features)
            self.frozen_bn = params.frozen_bn
            self.pool = params.pool
            if self.frozen_bn:
                self.train(True)

        def train(self, mode: bool = True):
            # Frozen BN (METHODS §9.2): batch statistics are never used, whatever model.train() says.
            super().train(mode)
            if self.frozen_bn:
                for module in self.modules():
                    if isinstance(module, nn.modules.batchnorm._BatchNorm):
                        module.eval()
            return self

        def forward(self, images: torch.Tensor):
            feature_map = self.body.forward_features(images)
            if feature_map.dim() == 4 and getattr(self.body, "output_fmt", "NCHW") == "NHWC":
                feature_map = feature_map.permute(0, 3, 1, 2)  # Swin & co. give B×h×w×F; the contract is B×F×h×w
            if feature_map.dim() == 3:  # token models (ViT): B×N×C -> mean over tokens, no spatial map
                return feature_map.mean(1), None
            if self.pool == "avg":
                pooled = feature_map.mean((2, 3))
            elif self.pool == "max":
                pooled = feature_map.amax((2, 3))
            else:
                pooled = feature_map.mean((2, 3)) + feature_map.amax((2, 3))
            return pooled, feature_map

    return TimmBackbone()


def _create(timm, params: TimmParams):
    kwargs = {"num_classes": 0, "global_pool": "", "in_chans": params.in_chans}
    if isinstance(params.pretrained, str):
        path = Path(os.path.expanduser(params.pretrained))
        if not path.is_file():
            raise ComponentError(
                f"pretrained weights file not found: {path}", where="[backbone] pretrained",
                fix="download the weights on a machine with internet access and point `pretrained` at the "
                    "file (dmlplug never downloads), or set pretrained = false",
            )
        model = timm.create_model(params.model, pretrained=False, **kwargs)
        _load_state(model, path)
        return model
    if params.pretrained:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            return timm.create_model(params.model, pretrained=True, **kwargs)
        except Exception as exc:
            raise ComponentError(
                f"pretrained weights for {params.model!r} are not in the local cache and cannot be downloaded "
                f"({type(exc).__name__})",
                where="[backbone] pretrained",
                fix="set pretrained to a local weights file path, or pretrained = false",
            ) from exc
    return timm.create_model(params.model, pretrained=False, **kwargs)


def _load_state(model, path: Path) -> None:
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ComponentError(f"cannot read weights file {path}: {type(exc).__name__}: {exc}",
                             where="[backbone] pretrained") from exc
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    if isinstance(state, dict) and "model" in state and isinstance(state["model"], dict):
        state = state["model"]
    # Classifier weights of an ImageNet checkpoint have no place in a feature extractor.
    missing, unexpected = model.load_state_dict(state, strict=False)
    unexpected = [k for k in unexpected if not k.startswith(("fc.", "head.", "classifier."))]
    if missing or unexpected:
        raise ComponentError(
            f"weights file {path} does not match model: {len(missing)} missing keys (e.g. {missing[:3]}), "
            f"{len(unexpected)} unexpected keys (e.g. {unexpected[:3]})",
            where="[backbone] pretrained", fix="check that the file belongs to the model named in [backbone] model",
        )


@hookimpl
def register_backbones(register):
    """Register the timm backbone family."""
    register("timm", build_timm, params=TimmParams, tags=("features",),
             description="Any timm model as a feature extractor (pooling, frozen BN, local weights).")
