"""Helpers of the component tests: one plugin host and a tiny build context."""

from __future__ import annotations

import numpy as np
import torch

from dmlplug.context import BuildContext
from dmlplug.plugins import PluginHost

NUM_CLASSES, EMBEDDING_SIZE, PER_CLASS = 8, 16, 4
BATCH = NUM_CLASSES * PER_CLASS
FEATURE_DIM = 24

#: The registry the parametrized tests iterate over (built-in plugins; loaded at collection time so a
#: newly registered component gets its own test ids).
HOST = PluginHost().load(entry_points=False)


def batch_labels() -> torch.Tensor:
    """32 labels, 4 samples of each of 8 classes."""
    return torch.arange(NUM_CLASSES).repeat_interleave(PER_CLASS)


def make_context(**overrides) -> BuildContext:
    """A tiny context: 8 classes, 16-d embeddings, batch 32, a Proxy-Anchor loss for proxy regularizers."""
    from pytorch_metric_learning.losses import ProxyAnchorLoss

    values = dict(num_classes=NUM_CLASSES, embedding_size=EMBEDDING_SIZE, feature_dim=FEATURE_DIM,
                  batch_size=BATCH, epochs=2, steps_per_epoch=4, seed=0, host=HOST,
                  train_labels=np.repeat(np.arange(NUM_CLASSES), 10).astype(np.int64),
                  loss=ProxyAnchorLoss(NUM_CLASSES, EMBEDDING_SIZE))
    values.update(overrides)
    return BuildContext(**values)


def build(kind: str, name: str, ctx: BuildContext | None = None, **params):
    """Build a registered component from (default) params on the tiny context."""
    info = HOST.registry.get(kind, name)
    return info.build(info.validate(params, where=f"{kind}.{name}"), ctx or make_context())
