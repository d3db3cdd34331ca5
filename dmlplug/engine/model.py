"""The trained network: backbone -> pooled features (+ feature map) -> head(s) -> embedding."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

if TYPE_CHECKING:
    from dmlplug.protocols import MultiHead


@dataclass
class ModelOutput:
    """What one forward pass produces.

    Attributes:
        embedding: ``B×D`` evaluation embedding (as returned by the head, normally L2-normalised).
        features: ``B×F`` pooled backbone features.
        feature_map: ``B×F×h×w`` feature map or None.
        named: Named embeddings of a multi-head head (empty for a single head).
    """

    embedding: torch.Tensor
    features: torch.Tensor
    feature_map: torch.Tensor | None = None
    named: dict[str, torch.Tensor] = field(default_factory=dict)


class EmbeddingModel(nn.Module):
    """Backbone and head as one module, so that checkpoints and optimizers see one tree.

    Args:
        backbone: Module returning ``(features, feature_map)``.
        head: Module mapping features to a tensor, or to a dict plus ``eval_embedding(dict)``.
    """

    def __init__(self, backbone: nn.Module, head: nn.Module):
        super().__init__()
        self.backbone = backbone
        self.head = head
        #: While True the backbone runs without gradients (warm-up of the head and loss parameters).
        self.backbone_frozen = False

    def forward(self, images: torch.Tensor) -> ModelOutput:
        """Embed a batch of images."""
        if self.backbone_frozen:
            with torch.no_grad():
                features, feature_map = self.backbone(images)
        else:
            features, feature_map = self.backbone(images)
        out = self.head(features)
        if isinstance(out, dict):  # a head that returns named embeddings is a multi head
            return ModelOutput(cast("MultiHead", self.head).eval_embedding(out), features, feature_map, out)
        return ModelOutput(out, features, feature_map)

    @torch.no_grad()
    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """Evaluation embedding only (no gradients)."""
        return self.forward(images).embedding


def freeze_backbone(model: EmbeddingModel, frozen: bool) -> None:
    """Switch the backbone's warm-up freeze on or off (gradients and forward under no_grad)."""
    model.backbone_frozen = frozen
    for param in model.backbone.parameters():
        param.requires_grad_(not frozen)


def make_ema_copy(model: nn.Module) -> nn.Module:
    """A frozen deep copy of ``model`` to be tracked with :func:`ema_update`.

    The copy has the same class and structure; its parameters have ``requires_grad`` False, so it never
    enters an optimizer and no gradient is ever computed for it.
    """
    import copy

    ema = copy.deepcopy(model)
    for param in ema.parameters():
        param.requires_grad_(False)
    return ema


@torch.no_grad()
def ema_update(ema: nn.Module, model: nn.Module, momentum: float) -> None:
    """``p_ema = m · p_ema + (1 − m) · p`` for every parameter; buffers (BN statistics …) are copied.

    Args:
        ema: The copy made by :func:`make_ema_copy`.
        model: The model being trained (same structure).
        momentum: ``m`` in ``[0, 1]``; 1 keeps the copy fixed, 0 makes it a plain copy.
    """
    ema_params = dict(ema.named_parameters())
    for name, param in model.named_parameters():
        target = ema_params[name]
        target.mul_(momentum).add_(param.detach().to(target.dtype), alpha=1.0 - momentum)
    ema_buffers = dict(ema.named_buffers())
    for name, buffer in model.named_buffers():
        ema_buffers[name].copy_(buffer)
