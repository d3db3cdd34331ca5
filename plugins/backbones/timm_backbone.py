"""A timm model as a dmlplug backbone: ``(pooled features, feature map)``, frozen BatchNorm, local weights.

Imported only by the factory in :mod:`dmlplug_builtins.backbones` (torch and timm at module level).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

import timm
import torch
from torch import nn

from dmlplug.errors import ComponentError


class TimmBackbone(nn.Module):
    """A timm model without classifier; pools its feature map itself so the map is available too.

    Args:
        model: A timm model created with ``num_classes=0, global_pool=""``.
        pool: ``"avg"``, ``"max"`` or ``"avgmax"`` (their sum).
        frozen_bn: Keep every BatchNorm in eval mode, whatever ``train()`` says.
    """

    #: The timm model: an ``nn.Module`` whose timm attributes (``num_features``, ``forward_features``) the
    #: static type of ``nn.Module`` does not know.
    body: Any

    def __init__(self, model: Any, pool: str = "avg", frozen_bn: bool = False) -> None:
        super().__init__()
        self.body = model
        self.num_features = int(model.num_features)
        self.frozen_bn = frozen_bn
        self.pool = pool
        if self.frozen_bn:
            self.train(True)

    def train(self, mode: bool = True) -> TimmBackbone:
        """Set the training mode; BatchNorm stays in eval mode when ``frozen_bn``."""
        # Frozen BN (docs/methods/revisiting.md): batch statistics are never used, whatever model.train() says.
        super().train(mode)
        if self.frozen_bn:
            for module in self.modules():
                if isinstance(module, nn.modules.batchnorm._BatchNorm):
                    module.eval()
        return self

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(B×F pooled features, B×F×h×w feature map)``; the map is ``None`` for token models (ViT)."""
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


def check_model_name(name: str) -> None:
    """Raise a ComponentError with close names when timm has no model ``name``."""
    if name not in timm.list_models() and not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ComponentError(f"unknown timm model {name!r}{hint}", where="[backbone] model",
                             fix="see timm.list_models() for valid names")


def create_model(name: str, pretrained: bool | str, in_chans: int) -> nn.Module:
    """A timm feature extractor; weights from a local file, timm's local cache, or none (never downloaded)."""
    kwargs: dict[str, Any] = {"num_classes": 0, "global_pool": "", "in_chans": in_chans}
    if isinstance(pretrained, str):
        path = Path(os.path.expanduser(pretrained))
        if not path.is_file():
            raise ComponentError(
                f"pretrained weights file not found: {path}", where="[backbone] pretrained",
                fix="download the weights on a machine with internet access and point `pretrained` at the "
                    "file (dmlplug never downloads), or set pretrained = false",
            )
        model = timm.create_model(name, pretrained=False, **kwargs)
        load_state(model, path)
        return model
    if pretrained:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            return timm.create_model(name, pretrained=True, **kwargs)
        except Exception as exc:
            raise ComponentError(
                f"pretrained weights for {name!r} are not in the local cache and cannot be downloaded "
                f"({type(exc).__name__})",
                where="[backbone] pretrained",
                fix="set pretrained to a local weights file path, or pretrained = false",
            ) from exc
    return timm.create_model(name, pretrained=False, **kwargs)


def load_state(model: nn.Module, path: Path) -> None:
    """Load a weights file into ``model``, ignoring classifier weights; a ComponentError when it does not fit."""
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
