"""Images per second of the input pipeline alone: JPEG decode + DML train transform + DataLoader.

No model runs, so the numbers are an upper bound on training speed: a GPU run that is much slower than
this is compute-bound, one that reaches it is data-bound (add workers, or decode on a faster disk).

Two parts, both alternating the compared variants round by round and reporting medians:

1. **Per-image CPU cost** in one process (thread CPU time, so it holds on a busy machine) of decode +
   RandomResizedCrop + flip + normalise, for PIL vs ``torchvision.io.decode_jpeg`` decoding and PIL
   (``transforms`` v1 + ``ToTensor``) vs uint8-tensor (``transforms.v2``) transforms (dmlplug's loader decodes
   JPEG/PNG with torchvision and uses ``transforms.v2``);
   images/s per core is its inverse.
2. **The engine's training loader** (``dmlplug.engine.data.train_loader`` over the engine's
   ``SeededDataset``, as a run builds it) per worker count and prefetch depth: steady-state images/s
   (wall clock) and images/s per core (divided by the cores busy: one with 0 workers, else the workers).

The projection to 16 cores assumes one core stays with the training process and the other 15 run loader
workers at this machine's per-core rate (part 1, dmlplug's pipeline), scaling linearly: workers are
independent processes, so this holds while the disk or page cache, memory bandwidth and the collate/transfer
in the main process keep up.

Example::

    python benchmarks/data_throughput.py                 # 512 images, workers 0,1,2
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


def transform_variants(image_size: int):
    """``{name: bytes -> normalised tensor}``: the decoders and transform implementations compared."""
    import torch
    from PIL import Image
    from torchvision import transforms as T
    from torchvision.io import decode_jpeg

    from dmlplug.data.transforms import IMAGENET_MEAN, IMAGENET_STD, build_transform

    def pil_decode(blob: bytes):
        with Image.open(io.BytesIO(blob)) as image:
            return image.convert("RGB")

    def jpeg_decode(blob: bytes):
        return decode_jpeg(torch.frombuffer(bytearray(blob), dtype=torch.uint8))

    pil_transform = T.Compose([T.RandomResizedCrop(image_size), T.RandomHorizontalFlip(), T.ToTensor(),
                               T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    dmlplug_transform = build_transform("train", augment="dml", image_size=image_size)
    return {
        "PIL decode only": pil_decode,
        "decode_jpeg only": jpeg_decode,
        "PIL decode + PIL transforms (v1, ToTensor)": lambda b: pil_transform(pil_decode(b)),
        "PIL decode + tensor transforms (v2)": lambda b: dmlplug_transform(pil_decode(b)),
        "decode_jpeg + tensor transforms (v2, dmlplug)": lambda b: dmlplug_transform(jpeg_decode(b)),
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


def measure(source, *, workers: int, batch_size: int, image_size: int, epochs: int, device: str,
            views: int, prefetch: int | None = None) -> list[float]:
    """Images per second of each epoch over ``source``, through the engine's training loader."""
    import torch

    from dmlplug.data.transforms import build_train_views
    from dmlplug.engine.batches import BatchPlan
    from dmlplug.engine.data import TransformedSource, train_loader
    from dmlplug.engine.seeding import SeededDataset

    dataset = TransformedSource(source, build_train_views(augment="dml", image_size=image_size, views=views))
    batches = BatchPlan(torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(
        dataset, generator=torch.Generator().manual_seed(0)), batch_size, drop_last=True), seed=0)
    options = {} if prefetch is None else {"prefetch": prefetch}
    loader = train_loader(SeededDataset(dataset), batches, workers=workers, device=device, seed=0, **options)
    rates = []
    for epoch in range(epochs):
        batches.set_epoch(epoch)
        start = time.perf_counter()
        seen = 0
        for images, _labels, _indices in loader:
            images.to(device, non_blocking=True)
            seen += len(images)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        rates.append(seen / (time.perf_counter() - start))
    del loader  # stops persistent workers before the next configuration starts its own
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
        print(f"{'variant':<46}  {'ms/image':>8}  {'images/s per core':>17}")
        for name, ms in costs.items():
            print(f"{name:<46}  {ms:>8.3f}  {1e3 / ms:>17.1f}")
        former = costs["PIL decode + PIL transforms (v1, ToTensor)"]
        pil_decode_v2 = costs["PIL decode + tensor transforms (v2)"]
        ours = costs["decode_jpeg + tensor transforms (v2, dmlplug)"]
        print(f"PIL transforms / tensor transforms: {former / pil_decode_v2:.2f}x; "
              f"with decode_jpeg (dmlplug's loader): {former / ours:.2f}x")

        print(f"\ntraining loader (engine's train_loader + SeededDataset), steady = mean of epochs 2..{args.epochs}")
        print(f"{'workers':>7}  {'prefetch':>8}  {'first epoch img/s':>17}  {'steady img/s':>12}  "
              f"{'img/s per core':>14}")
        for workers in (int(w) for w in args.workers.split(",")):
            for prefetch in ((None,) if workers == 0 else (int(p) for p in args.prefetch.split(","))):
                rates = measure(source, workers=workers, batch_size=args.batch_size, image_size=args.image_size,
                                epochs=args.epochs, device=device, views=args.views, prefetch=prefetch)
                steady = float(np.mean(rates[1:])) if len(rates) > 1 else rates[0]
                print(f"{workers:>7}  {prefetch or '-':>8}  {rates[0]:>17.1f}  {steady:>12.1f}  "
                      f"{steady / max(workers, 1):>14.1f}")

        per_core = 1e3 / ours
        print(f"\nprojection: {args.cores - 1} worker cores x {per_core:.0f} images/s per core (dmlplug's pipeline, "
              f"part 1) = {(args.cores - 1) * per_core:.0f} images/s on {args.cores} cores "
              f"({(args.cores - 1) * 1e3 / pil_decode_v2:.0f} with PIL decoding); assumes linear scaling over "
              f"independent worker processes, one core left to training, this machine's per-core speed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
