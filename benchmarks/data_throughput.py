"""Images per second of the input pipeline alone: JPEG decode + DML train transform + DataLoader.

No model runs, so the numbers are an upper bound on training speed: a GPU run that is much slower than
this is compute-bound, one that reaches it is data-bound (add workers, or decode on a faster disk).

Two parts, both alternating the compared variants round by round (epoch by epoch) and reporting medians:

1. **Per-image CPU cost** in one process (thread CPU time, so it holds on a busy machine) of decode +
   RandomResizedCrop + flip + normalise: the hand-written pipelines a user writes (Pillow decoding with the
   torchvision v1 transforms and ``ToTensor``, as in PML's and timm's examples; ``decode_jpeg`` with a
   ``transforms.v2`` Compose) against dmlplug's (``decode_jpeg``, as its file sources decode JPEG/PNG, and
   the ``dml`` policy); images/s per core is its inverse.
2. **Loader against loader**, per worker count and prefetch depth, the same images, batch size, workers,
   pinning and prefetch on both sides, alternating epoch by epoch: a hand-written loader (a ``Dataset`` over
   the file list that opens each file with Pillow and applies the v1 transforms, a ``DataLoader`` with
   ``shuffle=True``; no dmlplug code: the file paths and labels are taken out of dmlplug's source once,
   before timing) and the engine's training loader (``dmlplug.engine.data.train_loader`` over the engine's
   ``SeededDataset``, as a run builds it). Steady-state images/s (wall clock), ms per image of wall clock,
   and the ratio dmlplug / hand-written (above 1: dmlplug loads more images per second).

The projection to 16 cores assumes one core stays with the training process and the other 15 run loader
workers at this machine's per-core rate (part 1, dmlplug's pipeline), scaling linearly: workers are
independent processes, so this holds while the disk or page cache, memory bandwidth and the collate/transfer
in the main process keep up.

Example::

    python benchmarks/data_throughput.py                 # 512 images, workers 0,1,2, prefetch 2,4
    python benchmarks/data_throughput.py --quick         # a smoke run
    python benchmarks/data_throughput.py --folder $DMLPLUG_DATA/CUB_200_2011/images --workers 8,16

Without ``--folder`` it writes synthetic JPEGs of CUB-like size (500×375, ~50 KB) into a temporary folder.
The first epoch includes starting the workers; later epochs reuse them (persistent workers), as training does.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def write_synthetic_jpegs(directory: Path, count: int, size: tuple[int, int], classes: int = 8) -> list[str]:
    """``count`` photo-like JPEGs (smooth colour fields plus grain) spread over ``classes`` folders."""
    from PIL import Image

    rng = np.random.default_rng(0)
    width, height = size
    paths = []
    for i in range(count):
        coarse = rng.integers(0, 256, size=(height // 25 + 1, width // 25 + 1, 3), dtype=np.uint8)
        smooth = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC), dtype=np.int16)
        grain = rng.integers(-12, 13, size=smooth.shape, dtype=np.int16)
        path = directory / f"class{i % classes:02d}" / f"{i:06d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(smooth + grain, 0, 255).astype(np.uint8)).save(path, quality=90)
        paths.append(str(path))
    return paths


def folder_source(folder: Path, limit: int | None):
    """A FileImageSource over ``folder/<class>/*`` (at most ``limit`` images)."""
    from dmlplug.data.image_files import FileImageSource, list_class_folders, list_image_files

    paths, keys = [], []
    for name in list_class_folders(folder):
        files = list_image_files(folder / name)
        paths += files
        keys += [name] * len(files)
    if limit:
        keep = np.random.default_rng(0).permutation(len(paths))[:limit]
        paths, keys = [paths[i] for i in keep], [keys[i] for i in keep]
    return FileImageSource.from_class_keys(paths, keys, name=str(folder), check_files=False)


#: ImageNet's statistics, written out: the hand-written side uses no dmlplug code, constants included.
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

HAND_V1 = "hand-written: PIL decode + v1 transforms (ToTensor)"
HAND_V2 = "hand-written: decode_jpeg + v2 Compose"
DMLPLUG = "dmlplug: decode_jpeg + dml policy"


def hand_written_transform(image_size: int):
    """The torchvision v1 training transform users write: RandomResizedCrop, flip, ToTensor, Normalize."""
    from torchvision import transforms as T

    return T.Compose([T.RandomResizedCrop(image_size), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(MEAN, STD)])


def pil_decode(blob_or_path):
    """Pillow's decoding of a JPEG (bytes or a path) to RGB, as a user's ``Dataset`` does it."""
    from PIL import Image

    with Image.open(io.BytesIO(blob_or_path) if isinstance(blob_or_path, bytes) else blob_or_path) as image:
        return image.convert("RGB")


def transform_variants(image_size: int):
    """``{name: bytes -> normalised tensor}``: the decoders and transform implementations compared."""
    import torch
    from torchvision.io import decode_jpeg
    from torchvision.transforms import v2

    from dmlplug.data.transforms import build_transform

    def jpeg_decode(blob: bytes):
        return decode_jpeg(torch.frombuffer(bytearray(blob), dtype=torch.uint8))

    hand_v1 = hand_written_transform(image_size)
    hand_v2 = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(image_size, antialias=True), v2.RandomHorizontalFlip(),
                          v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD), v2.ToPureTensor()])
    dmlplug_transform = build_transform("train", augment="dml", image_size=image_size)
    return {
        "PIL decode only": pil_decode,
        "decode_jpeg only": jpeg_decode,
        HAND_V1: lambda b: hand_v1(pil_decode(b)),
        HAND_V2: lambda b: hand_v2(jpeg_decode(b)),
        "dmlplug: PIL decode + dml policy": lambda b: dmlplug_transform(pil_decode(b)),
        DMLPLUG: lambda b: dmlplug_transform(jpeg_decode(b)),
    }


def transform_costs(blobs: list[bytes], image_size: int, rounds: int) -> dict[str, float]:
    """Median thread CPU milliseconds per image of every variant, alternating the order round by round."""
    import torch

    variants = transform_variants(image_size)
    times: dict[str, list[float]] = {name: [] for name in variants}
    torch.manual_seed(0)
    for fn in variants.values():  # warm-up
        fn(blobs[0])
    for r in range(rounds):
        for name in (list(variants) if r % 2 == 0 else list(reversed(variants))):
            start = time.thread_time()
            for blob in blobs:
                variants[name](blob)
            times[name].append((time.thread_time() - start) / len(blobs) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def hand_written_loader(paths: list[str], labels: list[int], *, workers: int, batch_size: int, image_size: int,
                        device: str, prefetch: int | None):
    """The loader a user writes: a ``Dataset`` of Pillow-decoded files with the v1 transform, ``shuffle=True``."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    transform = hand_written_transform(image_size)

    class Files(Dataset):
        def __len__(self):
            return len(paths)

        def __getitem__(self, i):
            return transform(pil_decode(paths[i])), labels[i]

    options = {"prefetch_factor": prefetch or 2, "persistent_workers": True} if workers else {}
    return DataLoader(Files(), batch_size=batch_size, shuffle=True, drop_last=True, num_workers=workers,
                      pin_memory=device.startswith("cuda"), generator=torch.Generator().manual_seed(0), **options)


def dmlplug_loader(source, *, workers: int, batch_size: int, image_size: int, device: str, views: int,
                   prefetch: int | None):
    """The engine's training loader over ``source``, as a run builds it (``set_epoch`` before each epoch)."""
    import torch

    from dmlplug.data.transforms import build_train_views, random_sources
    from dmlplug.engine.batches import BatchPlan
    from dmlplug.engine.data import TransformedSource, train_loader
    from dmlplug.engine.seeding import SeededDataset

    transform = build_train_views(augment="dml", image_size=image_size, views=views)
    dataset = TransformedSource(source, transform)
    batches = BatchPlan(torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(
        dataset, generator=torch.Generator().manual_seed(0)), batch_size, drop_last=True), seed=0)
    options = {} if prefetch is None else {"prefetch": prefetch}
    loader = train_loader(SeededDataset(dataset, random_sources(transform)), batches, workers=workers, device=device,
                          seed=0, **options)
    return loader, batches


def epoch_rate(loader, device: str) -> float:
    """Images per second (wall clock) of one pass over ``loader``, the batches moved to ``device``."""
    import torch

    start = time.perf_counter()
    seen = 0
    for images, *_ in loader:
        images.to(device, non_blocking=True)
        seen += len(images)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return seen / (time.perf_counter() - start)


def measure(source, *, workers: int, batch_size: int, image_size: int, epochs: int, device: str,
            views: int, prefetch: int | None = None) -> dict[str, list[float]]:
    """Images per second of each epoch of the hand-written loader and dmlplug's, alternating epoch by epoch."""
    paths, labels = list(source.paths), [int(label) for label in source.labels]  # plain data, before timing
    options = {"workers": workers, "batch_size": batch_size, "image_size": image_size, "device": device,
               "prefetch": prefetch}
    hand = hand_written_loader(paths, labels, **options)
    ours, batches = dmlplug_loader(source, views=views, **options)
    rates: dict[str, list[float]] = {"hand": [], "dmlplug": []}
    for epoch in range(epochs):
        batches.set_epoch(epoch)
        for side in (("hand", "dmlplug") if epoch % 2 == 0 else ("dmlplug", "hand")):
            rates[side].append(epoch_rate(hand if side == "hand" else ours, device))
    del hand, ours  # stops persistent workers before the next configuration starts its own
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, help="class-folder tree of real images (default: synthetic)")
    parser.add_argument("--images", type=int, default=512, help="synthetic images to write / images to use")
    parser.add_argument("--size", default="500x375", help="synthetic image size WxH")
    parser.add_argument("--workers", default="0,1,2", help="comma-separated worker counts")
    parser.add_argument("--prefetch", default="2,4", help="comma-separated prefetch depths (batches per worker)")
    parser.add_argument("--batch-size", type=int, default=112)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--epochs", type=int, default=3, help="epochs per worker count (first one warms up)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds of the per-image cost comparison")
    parser.add_argument("--views", type=int, default=1, help="augmented views per image (DiVA needs 2)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--cores", type=int, default=16, help="cores of the machine to project to")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 128 images, 2 epochs, 3 rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.epochs, args.rounds, args.batch_size = 128, 2, 3, 32

    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    torch.set_num_threads(1)  # as in DataLoader workers; keeps workers=0 comparable
    with tempfile.TemporaryDirectory() as tmp:
        if args.folder is None:
            width, height = (int(v) for v in args.size.split("x"))
            start = time.perf_counter()
            write_synthetic_jpegs(Path(tmp), args.images, (width, height))
            kb = sum(f.stat().st_size for f in Path(tmp).rglob("*.jpg")) / args.images / 1024
            print(f"wrote {args.images} synthetic {width}x{height} JPEGs (mean {kb:.0f} KB) "
                  f"in {time.perf_counter() - start:.1f} s")
            source = folder_source(Path(tmp), None)
        else:
            source = folder_source(args.folder, args.images)
        print(f"{len(source)} images, batch {args.batch_size}, output {args.image_size}px, {args.views} view(s), "
              f"device {device}, {os.cpu_count()} CPUs")

        blobs = [Path(source.paths[i]).read_bytes() for i in range(min(len(source), 32))]
        costs = transform_costs(blobs, args.image_size, args.rounds)
        print(f"\nper-image CPU cost, one process ({args.rounds} rounds x {len(blobs)} images, median)")
        print(f"{'variant':<52}  {'ms/image':>8}  {'images/s per core':>17}")
        for name, ms in costs.items():
            print(f"{name:<52}  {ms:>8.3f}  {1e3 / ms:>17.1f}")
        hand_v1, hand_v2, ours = costs[HAND_V1], costs[HAND_V2], costs[DMLPLUG]
        print(f"{HAND_V1} / dmlplug: {hand_v1 / ours:.2f}x the CPU time per image; "
              f"{HAND_V2} / dmlplug: {hand_v2 / ours:.2f}x")

        print(f"\nloaders, alternating epoch by epoch; steady = median of epochs 2..{args.epochs} "
              "(ratio above 1: dmlplug loads more images per second)")
        print(f"{'workers':>7}  {'prefetch':>8}  {'hand img/s':>10}  {'dmlplug img/s':>13}  {'hand ms/img':>11}  "
              f"{'dmlplug ms/img':>14}  {'dmlplug / hand':>14}")
        for workers in (int(w) for w in args.workers.split(",")):
            for prefetch in ((None,) if workers == 0 else (int(p) for p in args.prefetch.split(","))):
                rates = measure(source, workers=workers, batch_size=args.batch_size, image_size=args.image_size,
                                epochs=args.epochs, device=device, views=args.views, prefetch=prefetch)
                steady = {side: statistics.median(r[1:]) if len(r) > 1 else r[0] for side, r in rates.items()}
                print(f"{workers:>7}  {prefetch or '-':>8}  {steady['hand']:>10.1f}  {steady['dmlplug']:>13.1f}  "
                      f"{1e3 / steady['hand']:>11.2f}  {1e3 / steady['dmlplug']:>14.2f}  "
                      f"{steady['dmlplug'] / steady['hand']:>14.2f}")

        per_core = 1e3 / ours
        print(f"\nprojection: {args.cores - 1} worker cores x {per_core:.0f} images/s per core (dmlplug's pipeline, "
              f"part 1) = {(args.cores - 1) * per_core:.0f} images/s on {args.cores} cores "
              f"({(args.cores - 1) * 1e3 / hand_v1:.0f} with the hand-written v1 pipeline); assumes linear scaling "
              f"over independent worker processes, one core left to training, this machine's per-core speed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
