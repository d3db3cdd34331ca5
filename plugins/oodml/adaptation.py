"""Few-shot head adaptation (docs/fewshot.md): cached backbone features, class-random batches, Margin loss.

The backbone is never trained here, so its pooled features of every test image are computed once
(:func:`backbone_features`) and reused by every iteration and every episode: only the head runs during
adaptation. This is also why support images go through the *test* transform, not the training
augmentation of the reference code (a cached feature cannot be re-augmented).

The Margin loss and the distance-weighted miner are the registered components ``margin`` and
``distance_weighted``, built through :func:`dmlplug.create`. torch is imported inside the functions.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import numpy as np

from dmlplug_builtins.oodml import FewShotSettings

if TYPE_CHECKING:
    import torch


def backbone_features(model: Any, source: Any, transform: Any, *, batch_size: int = 256, device: str = "cpu",
                      workers: int = 0) -> torch.Tensor:
    """Pooled backbone features of every image of ``source`` (eval mode, no gradients), on ``device``.

    Args:
        model: An embedding model (only ``model.backbone`` is run).
        source: An :class:`~dmlplug.data.ImageSource`.
        transform: Image transform (the test transform).
        batch_size: Images per forward pass.
        device: Where the backbone runs and the features stay.
        workers: DataLoader workers.

    Returns:
        ``N×F`` float32 tensor, rows in source order.
    """
    import torch

    from dmlplug_builtins.oodml.images import image_loader

    backbone = model.backbone
    was_training = backbone.training
    backbone.eval()
    chunks = []
    try:
        loader = image_loader(source, transform, batch_size=batch_size, workers=workers, device=device)
        with torch.no_grad():
            for images, _, _ in loader:
                features, _ = backbone(images.to(device, non_blocking=True))
                chunks.append(features.float())
    finally:
        backbone.train(was_training)
    return torch.cat(chunks)


def head_embedding(head: Any, features: torch.Tensor) -> torch.Tensor:
    """The evaluation embedding the head gives for ``features`` (multi-heads: their weighted concat)."""
    out = head(features)
    if isinstance(out, dict):
        return head.eval_embedding(out)
    return out


def embed_features(head: Any, features: torch.Tensor, batch_size: int = 4096) -> np.ndarray:
    """Head embeddings of cached features in eval mode, as a float32 numpy array."""
    import torch

    was_training = head.training
    head.eval()
    try:
        with torch.no_grad():
            parts = [head_embedding(head, features[i:i + batch_size]).float().cpu()
                     for i in range(0, len(features), batch_size)]
    finally:
        head.train(was_training)
    return torch.cat(parts).numpy()


def class_random_batches(labels: np.ndarray, batch_size: int, samples_per_class: int,
                         rng: np.random.Generator, members: list[np.ndarray] | None = None) -> np.ndarray:
    """One class-random batch: up to ``batch_size // samples_per_class`` classes, that many images each.

    Classes are drawn without replacement; a class with fewer support images gives all of them.
    ``members`` (positions of every class's images, from :func:`class_members`) saves recomputing them.
    """
    groups = class_members(labels) if members is None else members
    take = min(len(groups), max(1, batch_size // samples_per_class))
    batch = []
    for cls in rng.choice(len(groups), size=take, replace=False):
        group = groups[cls]
        if len(group) <= samples_per_class:
            batch.extend(group.tolist())
        else:
            batch.extend(group[rng.choice(len(group), size=samples_per_class, replace=False)].tolist())
    return np.asarray(batch, dtype=np.int64)


def class_members(labels: np.ndarray) -> list[np.ndarray]:
    """Positions of the images of every distinct label, in label order."""
    labels = np.asarray(labels)
    return [np.flatnonzero(labels == cls) for cls in np.unique(labels)]


def adaptation_criteria(settings: FewShotSettings, num_classes: int) -> tuple[Any, Any]:
    """The registered Margin loss (fixed β) and distance-weighted miner (anchors with a positive) of adaptation."""
    import dmlplug

    loss = dmlplug.create("loss", "margin", num_classes=num_classes, margin=settings.margin, beta=settings.beta,
                          learn_beta=False)
    miner = dmlplug.create("miner", "distance_weighted", lower_cutoff=settings.lower_cutoff,
                           anchors="with_positive")
    return loss, miner


def adapt_head(head: Any, features: torch.Tensor, labels: np.ndarray, settings: FewShotSettings,
               iterations: int, *, seed: int) -> tuple[Any, list[float]]:
    """Train a deep copy of ``head`` on support features; ``head`` itself is not modified.

    Margin loss (fixed β, not optimised) on distance-weighted triplets, Adam on the head's parameters
    only (docs/fewshot.md). Randomness (batches, miner) is seeded with ``seed`` and does not disturb
    the caller's torch generator.

    Returns:
        ``(adapted head in eval mode, loss of every iteration)``.
    """
    import torch

    adapted = copy.deepcopy(head)
    for param in adapted.parameters():
        param.requires_grad_(True)
    adapted.train()
    labels = np.asarray(labels, dtype=np.int64)
    loss_fn, miner = adaptation_criteria(settings, int(labels.max()) + 1)
    loss_fn.to(features.device)
    optimizer = torch.optim.Adam(adapted.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    label_tensor = torch.as_tensor(labels, device=features.device)
    rng = np.random.default_rng([settings.seed, seed])
    members = class_members(labels)
    losses: list[Any] = []
    devices = [features.device] if features.device.type == "cuda" else []
    threads = torch.get_num_threads()
    if features.device.type == "cpu" and settings.cpu_threads:
        # Batches of ~100 small vectors: extra threads only add synchronisation (10x slower when the
        # cores are shared with other jobs).
        torch.set_num_threads(settings.cpu_threads)
    try:
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(int(rng.integers(2**31)))
            for _ in range(iterations):
                batch = torch.as_tensor(class_random_batches(labels, settings.batch_size,
                                                             settings.samples_per_class, rng, members),
                                        device=features.device)
                embeddings = head_embedding(adapted, features[batch]).float()
                batch_labels = label_tensor[batch]
                loss = loss_fn(embeddings, batch_labels, miner(embeddings, batch_labels))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                losses.append(loss.detach())  # no .item() per step: it would synchronise a GPU every step
    finally:
        torch.set_num_threads(threads)
    adapted.eval()
    return adapted, (torch.stack(losses).float().cpu().tolist() if losses else [])
