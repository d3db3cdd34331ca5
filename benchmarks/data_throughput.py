"""Images per second of the input pipeline alone: JPEG decode + DML train transform + DataLoader.

No model runs, so the numbers are an upper bound on training speed: a GPU run that is much slower than
this is compute-bound, one that reaches it is data-bound (add workers, or decode on a faster disk).

Example::

    python benchmarks/data_throughput.py --images 512 --workers 0,1,2,4
    python benchmarks/data_throughput.py --folder $DMLPLUG_DATA/CUB_200_2011/images --workers 8,16

Without ``--folder`` it writes synthetic JPEGs of CUB-like size (500×375, ~50 KB) into a temporary folder.
The first epoch includes starting the workers; later epochs reuse them (persistent workers), as training does.
"""

from __future__ import annotations

import argparse
import os
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
    from dmlplug.data.files import FileImageSource, list_class_folders, list_image_files

    paths, keys = [], []
    for name in list_class_folders(folder):
        files = list_image_files(folder / name)
        paths += files
        keys += [name] * len(files)
    if limit:
        keep = np.random.default_rng(0).permutation(len(paths))[:limit]
        paths, keys = [paths[i] for i in keep], [keys[i] for i in keep]
    return FileImageSource.from_class_keys(paths, keys, name=str(folder), check_files=False)


def measure(source, *, workers: int, batch_size: int, image_size: int, epochs: int, device: str,
            views: int) -> list[float]:
    """Images per second of each epoch over ``source``, through the engine's training loader."""
    import torch

    from dmlplug.data.transforms import build_train_views
    from dmlplug.engine.data import TransformedSource, train_loader

    dataset = TransformedSource(source, build_train_views(augment="dml", image_size=image_size, views=views))
    batches = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(dataset), batch_size, drop_last=False)
    loader = train_loader(dataset, batches, workers=workers, device=device, seed=0)
    rates = []
    for _ in range(epochs):
        start = time.perf_counter()
        seen = 0
        for images, _labels, _indices in loader:
            batch = images if isinstance(images, (list, tuple)) else [images]
            for view in batch:
                view.to(device, non_blocking=True)
            seen += len(batch[0])
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        rates.append(seen / (time.perf_counter() - start))
    del loader  # stops persistent workers before the next configuration starts its own
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, help="class-folder tree of real images (default: synthetic)")
    parser.add_argument("--images", type=int, default=512, help="synthetic images to write / images to use")
    parser.add_argument("--size", default="500x375", help="synthetic image size WxH")
    parser.add_argument("--workers", default="0,1,2,4", help="comma-separated worker counts")
    parser.add_argument("--batch-size", type=int, default=112)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--epochs", type=int, default=3, help="epochs per worker count (first one warms up)")
    parser.add_argument("--views", type=int, default=1, help="augmented views per image (DiVA needs 2)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    args = parser.parse_args()

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
        print(f"{'workers':>7}  {'first epoch img/s':>17}  {'steady img/s':>12}")
        for workers in (int(w) for w in args.workers.split(",")):
            rates = measure(source, workers=workers, batch_size=args.batch_size, image_size=args.image_size,
                            epochs=args.epochs, device=device, views=args.views)
            steady = float(np.mean(rates[1:])) if len(rates) > 1 else rates[0]
            print(f"{workers:>7}  {rates[0]:>17.1f}  {steady:>12.1f}")


if __name__ == "__main__":
    main()
