"""Sequential batches of transformed images of a dataset source (split generation, few-shot features).

torch is imported inside :func:`image_loader`; the items are ``(image tensor, label, index)`` like the
engine's evaluation loader, in source order.
"""

from __future__ import annotations

from typing import Any


class TransformedImages:
    """A map-style dataset over an :class:`~dmlplug.data.ImageSource`: ``(transform(image), label, index)``.

    Defined at module level so DataLoader workers can pickle it.
    """

    def __init__(self, source: Any, transform: Any):
        self.source = source
        self.transform = transform

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> tuple[Any, int, int]:
        return self.transform(self.source.load_image(int(index))), int(self.source.labels[index]), int(index)


def image_loader(source: Any, transform: Any, *, batch_size: int, workers: int = 0, device: str = "cpu") -> Any:
    """A DataLoader yielding ``(images B×C×H×W, labels, indices)`` over ``source`` in order.

    Args:
        source: The images (an :class:`~dmlplug.data.ImageSource`).
        transform: A deterministic (test) transform: no seeding of the workers is needed.
        batch_size: Images per batch.
        workers: DataLoader worker processes.
        device: Where the batches go next (pinned memory for CUDA).
    """
    from torch.utils.data import DataLoader

    # TransformedImages is map-style without subclassing Dataset, so that this module imports no torch.
    return DataLoader(TransformedImages(source, transform), batch_size=batch_size, shuffle=False,  # type: ignore[arg-type]
                      num_workers=workers, pin_memory=str(device).startswith("cuda"))
