"""The bare side of ``benchmarks/train_speed.py``: hand-written training loops, and what their images cost.

:class:`BareLoop` is a PyTorch + PML training loop written as a user writes it; ``against`` picks its data
pipeline (:data:`AGAINST`). :func:`transform_costs` measures the per-image CPU time of the data pipelines alone.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

#: ImageNet's statistics, written out: the hand-written side uses no dmlplug code, constants included.
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

#: What each comparison's bare loop is, as the output names it.
AGAINST = {
    "hand": "hand-written loop (torchvision v1 transforms on PIL images: what users write; no dmlplug code)",
    "engine": "engine only (the bare loop with dmlplug's own loading and transform: the engine's cost alone)",
}


def hand_written_transform(p: Any):
    """The torchvision v1 transform a user writes, with the augmentation parameters of dmlplug's policy."""
    from torchvision import transforms as T

    size = p.image_size
    geometry = {
        "light": [T.RandomResizedCrop(size, scale=(0.7, 1.0), ratio=(0.9, 1.1))],
        "dml": [T.RandomResizedCrop(size), T.RandomHorizontalFlip()],
        "none": [T.Resize((size, size))],
    }[p.augment]
    return T.Compose([*geometry, T.ToTensor(), T.Normalize(MEAN, STD)])


def hand_written_dataset(p: Any, images, labels):
    """A user's ``Dataset`` over an in-memory uint8 array (``N×H×W`` or ``N×H×W×3``): RGB PIL image, transform."""
    from PIL import Image
    from torch.utils.data import Dataset

    transform = hand_written_transform(p)

    class Images(Dataset):
        def __len__(self):
            return len(labels)

        def __getitem__(self, i):
            return transform(Image.fromarray(images[i]).convert("RGB")), int(labels[i])

    return Images()


def engine_dataset(p: Any, source):
    """The bare loop's ``Dataset`` with dmlplug's data pipeline: the source's loading and the policy, as a run."""
    from torch.utils.data import Dataset

    from dmlplug.data.transforms import build_transform

    transform = build_transform("train", augment=p.augment, image_size=p.image_size)
    load = getattr(source, "load_tensor", source.load_image)  # what the engine's TransformedSource prefers

    class Images(Dataset):
        def __len__(self):
            return len(source)

        def __getitem__(self, i):
            return transform(load(i)), int(source.labels[i])

    return Images()


class BareLoop:
    """A hand-written PyTorch + PML training loop over ``p``'s shapes, one :meth:`step` at a time.

    ``against`` picks its data pipeline (see :data:`AGAINST`): ``"hand"`` a hand-written one over ``source``'s
    raw array, ``"engine"`` dmlplug's.
    """

    def __init__(self, p: Any, workers: int, steps: int, source, against: str = "hand"):
        import timm
        import torch
        import torch.nn.functional as F
        from pytorch_metric_learning import losses, miners, samplers
        from torch.utils.data import DataLoader

        torch.manual_seed(0)
        dataset = hand_written_dataset(p, *raw_images(source)) if against == "hand" else engine_dataset(p, source)

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.body = timm.create_model(p.model, pretrained=False, num_classes=0, global_pool="avg")
                self.fc = torch.nn.Linear(self.body.num_features, p.embedding_size)

            def forward(self, x):
                return F.normalize(self.fc(self.body(x)), dim=-1)

        self.p, self.torch = p, torch
        self.model = Net().to(p.device)
        if p.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        sampler = samplers.MPerClassSampler(source.labels, m=p.m, batch_size=p.batch_size,
                                            length_before_new_iter=steps * p.batch_size)
        self.loader = DataLoader(dataset, batch_size=p.batch_size, sampler=sampler, num_workers=workers,
                                 pin_memory=p.device == "cuda", drop_last=True)
        self.batches = iter(self.loader)
        self.loss_fn, self.miner = losses.MultiSimilarityLoss(), miners.MultiSimilarityMiner()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3, weight_decay=1e-4)
        self.model.train()

    def step(self) -> None:
        """Load the next batch and train on it."""
        torch, p = self.torch, self.p
        images, labels = next(self.batches)
        images = images.to(p.device, non_blocking=True)
        if p.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        labels = labels.to(p.device, non_blocking=True)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=p.bf16):
            emb = self.model(images)
        emb = emb.float()
        loss = self.loss_fn(emb, labels, self.miner(emb, labels))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def close(self) -> None:
        """Stop the loader's workers now (the iterator's last reference)."""
        del self.batches


def raw_images(source):
    """The uint8 image array and int labels of an in-memory source: what a user holds without dmlplug."""
    import numpy as np

    if not hasattr(source, "images"):
        raise SystemExit(f"train_speed: the hand-written loop needs an in-memory source, got {type(source).__name__}")
    return np.asarray(source.images), np.asarray(source.labels)




def transform_costs(p: Any, source, rounds: int = 10, images: int = 256) -> dict[str, float]:
    """Median thread CPU µs per image of each data pipeline alone (one process, one torch thread).

    The variants run in turn, their order alternating round by round: the hand-written one (array -> RGB PIL
    image -> torchvision v1), the same augmentation as a torchvision v2 ``Compose`` on the PIL image (dmlplug's
    pipeline before its lean steps), and dmlplug's (the source's ``load_tensor`` and the policy).
    """
    import torch
    from PIL import Image
    from torchvision.transforms import v2

    array, labels = raw_images(source)
    hand = hand_written_dataset(p, array, labels)
    engine = engine_dataset(p, source)
    size = p.image_size
    geometry = {"light": [v2.RandomResizedCrop(size, scale=(0.7, 1.0), ratio=(0.9, 1.1), antialias=True)],
                "dml": [v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip()],
                "none": [v2.Resize((size, size), antialias=True)]}[p.augment]
    former = v2.Compose([v2.ToImage(), *geometry, v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD),
                         v2.ToPureTensor()])
    variants = {
        "hand-written (v1 on PIL)": lambda i: hand[i],
        "torchvision v2 Compose on PIL": lambda i: former(Image.fromarray(array[i]).convert("RGB")),
        "dmlplug (load_tensor + policy)": lambda i: engine[i],
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a DataLoader worker
    times: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for r in range(rounds):
            for name in (list(variants) if r % 2 == 0 else list(reversed(variants))):
                start = time.thread_time()
                for i in range(images):
                    variants[name](i)
                times[name].append((time.thread_time() - start) / images * 1e6)
    finally:
        torch.set_num_threads(threads)
    return {name: statistics.median(t) for name, t in times.items()}
