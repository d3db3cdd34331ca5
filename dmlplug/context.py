"""The build context handed to every component factory."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class BuildContext:
    """What a factory may need that the recipe should not repeat.

    Fields are filled as the run is assembled (dataset first, then backbone, head, loss …), so a factory
    sees everything built before it. Outside a run (``dmlplug.create``) unset fields keep their defaults
    and may be given as keyword arguments.

    Attributes:
        device: ``"cpu"`` or ``"cuda"`` (or ``"cuda:N"``).
        num_classes: Number of training classes (labels are ``0 .. num_classes-1``).
        embedding_size: Size of the evaluation embedding produced by the head.
        feature_dim: Size of the backbone's pooled features.
        train_labels: int64 numpy array of training labels (samplers).
        batch_size: Training batch size.
        epochs: Number of training epochs.
        steps_per_epoch: Optimizer steps per epoch, once the sampler is built.
        seed: The run seed.
        loss: The built loss module (regularizers that reuse its proxies read it).
        head: The built head module.
        run_dir: The run directory, when there is one.
        host: The :class:`dmlplug.plugins.PluginHost` (to build nested components).
        extras: Free-form values plugins may share.
    """

    device: str = "cpu"
    num_classes: int | None = None
    embedding_size: int | None = None
    feature_dim: int | None = None
    train_labels: Any = None
    batch_size: int | None = None
    epochs: int | None = None
    steps_per_epoch: int | None = None
    seed: int = 0
    loss: Any = None
    head: Any = None
    run_dir: Path | None = None
    host: Any = None
    extras: dict[str, Any] = field(default_factory=dict)
