"""From dataset sources to DataLoaders."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from dmlplug.data.base import ImageSource
from dmlplug.engine.seeding import worker_init


class TransformedSource(Dataset):
    """Torch dataset over an :class:`ImageSource`: ``(image_tensor, label, index)`` per item.

    A transform that returns several views (a tuple, see :class:`dmlplug.data.transforms.MultiView`) gives
    one ``N×C×H×W`` tensor per item, so batches are ``B×N×C×H×W`` and :func:`split_views` separates them.
    """

    def __init__(self, source: ImageSource, transform: Any):
        self.source = source
        self.transform = transform

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        image = self.source.load_image(int(index))
        out = self.transform(image)
        if isinstance(out, tuple | list):
            out = torch.stack(list(out))
        return out, int(self.source.labels[index]), int(index)


def split_views(images: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``(first view, [extra views])`` of a batch: ``B×N×C×H×W`` -> ``B×C×H×W`` and ``N - 1`` more.

    A plain ``B×C×H×W`` batch has no extra views.
    """
    if images.dim() == 5:
        return images[:, 0], [images[:, i] for i in range(1, images.shape[1])]
    return images, []


def train_loader(dataset: Dataset, batch_sampler: Any, *, workers: int, device: str, seed: int) -> DataLoader:
    """Loader driven by a batch sampler; workers are seeded from ``seed``."""
    generator = torch.Generator()
    generator.manual_seed(seed)
    return DataLoader(
        dataset,
        batch_sampler=batch_sampler,
        num_workers=workers,
        pin_memory=device.startswith("cuda"),
        persistent_workers=workers > 0,
        worker_init_fn=worker_init,
        generator=generator,
    )


def eval_loader(dataset: Dataset, *, batch_size: int, workers: int, device: str) -> DataLoader:
    """Sequential loader for embedding a split."""
    return DataLoader(
        dataset, batch_size=batch_size, shuffle=False, num_workers=workers,
        pin_memory=device.startswith("cuda"), worker_init_fn=worker_init,
    )


@torch.no_grad()
def embed_loader(model: torch.nn.Module, loader: DataLoader, device: str, autocast: Any = None) -> tuple[
        np.ndarray, np.ndarray]:
    """Embed every image of ``loader`` in eval mode; returns (float32 N×D, int64 labels) on the CPU."""
    was_training = model.training
    model.eval()
    chunks, labels = [], []
    try:
        for images, batch_labels, _ in loader:
            images = images.to(device, non_blocking=True)
            if autocast is not None:
                with torch.autocast(device_type="cuda", dtype=autocast):
                    emb = model.embed(images)
            else:
                emb = model.embed(images)
            chunks.append(emb.float().cpu())
            labels.append(batch_labels)
    finally:
        model.train(was_training)
    return torch.cat(chunks).numpy(), torch.cat(labels).numpy().astype(np.int64)
