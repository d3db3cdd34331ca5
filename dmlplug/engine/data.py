"""From dataset sources to DataLoaders."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from dmlplug.data.base import ImageSource
from dmlplug.engine.seeding import worker_init

if TYPE_CHECKING:
    from dmlplug.engine.model import EmbeddingModel


class TransformedSource(Dataset):
    """Torch dataset over an :class:`ImageSource`: ``(image_tensor, label, index)`` per item.

    A transform that returns several views (a tuple, see :class:`dmlplug.data.transforms.MultiView`) gives
    one ``N×C×H×W`` tensor per item, so batches are ``B×N×C×H×W`` and :func:`split_views` separates them.

    Images come from the source's ``load_tensor`` (a ``3×H×W`` uint8 tensor; file sources decode JPEG and
    PNG with ``torchvision.io``, faster than Pillow) where it has one, else from ``load_image`` (a PIL image):
    dmlplug's transforms (:func:`dmlplug.data.transforms.build_transform`) accept both and give the same
    result. Pass ``tensors=False`` for a transform that needs PIL images (the engine does for a training policy
    that does not declare ``tensor_input``, :func:`dmlplug.data.transforms.accepts_tensors`).
    """

    def __init__(self, source: ImageSource, transform: Any, *, tensors: bool = True):
        self.source = source
        self.transform = transform
        self.tensors = tensors
        load_tensor = getattr(source, "load_tensor", None) if tensors else None
        # chosen once: this runs for every training image
        self._load = load_tensor if load_tensor is not None else source.load_image

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        out = self.transform(self._load(int(index)))
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


def train_loader(dataset: Dataset, batch_sampler: Any, *, workers: int, device: str, seed: int,
                 prefetch: int = 2) -> DataLoader:
    """Loader driven by a batch sampler; workers are seeded from ``seed``.

    Workers persist across epochs (starting them costs more than an epoch of a small dataset), batches are
    pinned for asynchronous host-to-GPU copies on CUDA, and each worker keeps ``prefetch`` batches ready.
    The loader has its own generator, so creating its iterator draws nothing from torch's global one.

    Args:
        dataset: Map-style dataset (the engine's ``SeededDataset`` over a ``TransformedSource``).
        batch_sampler: Yields the index lists of the batches (the engine's ``BatchPlan``).
        workers: Loader worker processes; 0 loads in the main process.
        device: Training device; ``cuda*`` pins batches.
        seed: Seed of the loader's own generator (worker base seeds).
        prefetch: Batches loaded ahead per worker (PyTorch's ``prefetch_factor``); ignored without workers.
            ``benchmarks/data_throughput.py`` measures it; the default 2 is PyTorch's.
    """
    generator = torch.Generator()
    generator.manual_seed(seed)
    return DataLoader(
        dataset,
        batch_sampler=batch_sampler,
        num_workers=workers,
        pin_memory=device.startswith("cuda"),
        persistent_workers=workers > 0,
        prefetch_factor=prefetch if workers > 0 else None,
        worker_init_fn=worker_init,
        generator=generator,
    )


def shutdown_workers(loader: DataLoader) -> None:
    """Stop the persistent worker processes of ``loader`` now, in this process.

    With ``persistent_workers`` the DataLoader keeps its iterator (and its workers) until the loader is
    garbage-collected. A finished run is part of reference cycles, so that happens only at some later
    collection: its workers outlive the run, and a collection inside a worker forked by a later loader
    tries to stop processes that are not its children ("can only test a child process"). PyTorch has no
    public call for this; the iterator's own shutdown is what its ``__del__`` runs.
    """
    iterator = getattr(loader, "_iterator", None)
    if iterator is None:
        return
    loader._iterator = None
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def eval_loader(dataset: Dataset, *, batch_size: int, workers: int, device: str) -> DataLoader:
    """Sequential loader for embedding a split."""
    return DataLoader(
        dataset, batch_size=batch_size, shuffle=False, num_workers=workers,
        pin_memory=device.startswith("cuda"), worker_init_fn=worker_init,
    )


@torch.no_grad()
def embed_loader(model: EmbeddingModel, loader: DataLoader, device: str, autocast: Any = None) -> tuple[
        torch.Tensor, np.ndarray]:
    """Embed every image of ``loader`` in eval mode.

    Returns:
        The float32 ``N×D`` embeddings as a tensor on ``device`` (a GPU run evaluates them there, without a
        copy to the CPU) and the int64 labels as a numpy array.
    """
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
            chunks.append(emb.float())
            labels.append(batch_labels)
    finally:
        model.train(was_training)
    return torch.cat(chunks), torch.cat(labels).numpy().astype(np.int64)
