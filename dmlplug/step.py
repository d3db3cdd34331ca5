"""The data that flows through one training step.

Kept free of torch imports at module level so the host stays import-light; the fields hold tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class StepOutput:
    """Everything a loss term may look at in one training step.

    Attributes:
        embeddings: ``B×D`` L2-normalised evaluation embedding of the batch (the head's output, or its
            ``eval_embedding`` for multi-head models).
        labels: ``B`` int64 labels (training classes, ``0 .. C-1``).
        features: ``B×F`` pooled backbone features (not detached).
        feature_map: ``B×F×h×w`` backbone feature map, or ``None`` when the backbone gives none.
        named_embeddings: Named embeddings of a multi-head model (empty for a single head).
        loss_module: The recipe's loss module (proxy-based regularizers read its proxies).
        indices: Dataset indices of the batch samples.
        images: ``B×C×H×W`` batch images on the device (the first view, the one the model was run on).
        views: Extra augmented views of the batch (``B×C×H×W`` each, on the device, the same samples in the
            same order), filled only when a component requires ``"views:N"`` (``N - 1`` extra views).
        epoch: Current epoch (1-based).
        step: Global optimizer step (1-based).
        model: The model being trained (components that need a second forward pass use it).
        ema_model: The engine's exponential-moving-average copy of the model (same class as ``model``,
            parameters with ``requires_grad`` False), only when a component requires ``"ema"``.
        extras: Free-form values shared between components within the step.
    """

    embeddings: Any
    labels: Any
    features: Any = None
    feature_map: Any = None
    named_embeddings: dict[str, Any] = field(default_factory=dict)
    loss_module: Any = None
    indices: Any = None
    images: Any = None
    views: list[Any] = field(default_factory=list)
    epoch: int = 1
    step: int = 1
    model: Any = None
    ema_model: Any = None
    extras: dict[str, Any] = field(default_factory=dict)
