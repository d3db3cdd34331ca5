"""The deployment commands of the ``dmlplug`` command line: export, calibrate, embed, search.

:func:`dmlplug.commands.register_commands` adds them to the app; the work happens in ``dmlplug/bundle/``. Only
typer is imported here: torch comes with the command that runs, so ``dmlplug --help`` stays fast.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    import numpy as np

    from dmlplug.bundle.bundle import Embedder

Checkpoint = Annotated[str, typer.Option("--checkpoint", help="Which checkpoint of the run: best or last.")]
Device = Annotated[str, typer.Option("--device", help="cpu, cuda or cuda:N.")]
BatchSize = Annotated[int, typer.Option("--batch-size", min=1, help="Images per forward pass.")]
Strict = Annotated[bool, typer.Option("--strict", help="Fail on an unreadable image instead of skipping it.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]


def _say(message: str) -> None:
    """Print a progress or warning line on stderr, so that stdout stays clean for --json.

    Args:
        message: The line to print.
    """
    print(message, file=sys.stderr, flush=True)


def cmd_export(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (or a checkpoint file).", show_default=False)],
    out: Annotated[Path, typer.Option("--out", help="The bundle folder to create (new or empty).",
                                      show_default=False)],
    checkpoint: Checkpoint = "best",
    format: Annotated[str, typer.Option("--format", help="onnx (model.onnx) or torchscript (model.pt).")] = "onnx",
    images: Annotated[int, typer.Option("--images", min=0, help="Test images the export is verified on.")] = 256,
    tolerance: Annotated[float, typer.Option("--tolerance", help="Largest max |Δ embedding| accepted between "
                                             "PyTorch and the exported model.")] = 1e-4,
    device: Device = "cpu",
    calibrate: Annotated[bool, typer.Option("--calibrate/--no-calibrate", help="Calibrate the thresholds "
                                            "(bundle.json `thresholds`).")] = True,
    allow_untrained: Annotated[bool, typer.Option("--allow-untrained", help="Export a checkpoint written before "
                                                  "any training step (a best epoch 0), e.g. as a baseline.")]
    = False,
    log_model: Annotated[bool, typer.Option("--log-model/--no-log-model", help="Once the bundle is written, log it "
                                            "as a model to the run's experiment tracker (a run trained with the "
                                            "mlflow logger: its MLflow run; docs/monitoring.md).")] = False,
) -> None:
    """Export a trained run as a bundle: model.onnx or model.pt, and bundle.json (preprocessing, thresholds).

    The exported model is compared with PyTorch on test images; the export fails, writing nothing, when the
    embeddings differ by more than --tolerance. A checkpoint of the untrained model is refused without
    --allow-untrained. With --log-model the written bundle is also logged as a model of the run's MLflow run.
    """
    from dmlplug.bundle.export import export_run

    manifest = export_run(run_dir, out, checkpoint=checkpoint, format=format, images=images,
                          tolerance=tolerance, device=device, calibrate=calibrate, allow_untrained=allow_untrained,
                          log_model=log_model, log=_say)
    check = manifest["verification"]
    lines = [f"bundle written to {out} ({manifest['model']['file']}, {manifest['embedding_size']}-d embeddings)"]
    if check.get("images"):
        lines.append(f"verified on {check['images']} test images: max |Δ embedding| {check['max_abs_diff']:.3g} "
                     f"(tolerance {check['tolerance']:g}); recall@1 PyTorch {check['recall@1_pytorch']}, "
                     f"exported {check['recall@1_exported']}")
    values = manifest["thresholds"].get("values") if manifest["thresholds"] else None
    if values:
        shown = ", ".join(f"{name} {value:.6f}" for name, value in values.items())
        lines.append(f"thresholds: {shown}; search accepts at {manifest['thresholds']['default']}")
    typer.echo("\n".join(lines))


def cmd_calibrate(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.", show_default=False)],
    checkpoint: Checkpoint = "best",
    split: Annotated[str | None, typer.Option("--split", help="val or test (default: val when the run has a "
                                                               "validation split, else test).")] = None,
    device: Device = "cpu",
    as_json: Annotated[bool, typer.Option("--json", help="Print the calibration as JSON.")] = False,
) -> None:
    """Calibrate acceptance thresholds: similarity at target false-accept rates and max F1, with TAR spread."""
    from dmlplug.bundle.calibrate import calibrate_run

    calibration = calibrate_run(run_dir, checkpoint=checkpoint, split=split, device=device)
    typer.echo(json.dumps(calibration.to_dict(), indent=2) if as_json else calibration.format_table())


@contextmanager
def _progress(total: int, what: str, quiet: bool) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr (stdout stays clean for --json); a no-op callback when quiet.

    Args:
        total: The number of items the bar counts to.
        what: The label shown left of the bar.
        quiet: Show no bar.

    Yields:
        ``advance(n)``, to call after each ``n`` items done.
    """
    if quiet or total == 0:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda n: bar.update(task, advance=n)


def _embed_folder(embedder: Embedder, images_dir: Path, *, batch_size: int, strict: bool,
                  quiet: bool) -> tuple[np.ndarray, list[str]]:
    """``(embeddings, paths)`` of every readable image under ``images_dir``; reports the others on stderr.

    Args:
        embedder: The bundle or run that embeds the images.
        images_dir: The folder searched recursively for images.
        batch_size: Images per forward pass.
        strict: Fail on an unreadable image instead of skipping it.
        quiet: Show no progress bar.

    Returns:
        The embeddings (one row per kept image) and the paths of the images kept, in sorted order.
    """
    from dmlplug.bundle.images import describe_failures, list_images

    paths = list_images(images_dir)
    with _progress(len(paths), "embedding", quiet) as advance:
        embeddings, kept, failures = embedder.embed_files(paths, batch_size=batch_size, strict=strict,
                                                          progress=advance)
    for line in describe_failures(failures):
        _say(line)
    return embeddings, kept


def cmd_embed(
    target: Annotated[Path, typer.Argument(help="A bundle folder, or a run directory.", show_default=False,
                                           metavar="BUNDLE_DIR|RUN_DIR")],
    images_dir: Annotated[Path, typer.Argument(help="Folder of images (searched recursively).",
                                               show_default=False)],
    out: Annotated[Path, typer.Option("--out", help="The .npz file to write; with --shards (or under torchrun) "
                                      "the folder to create (new or empty).", show_default=False)],
    batch_size: BatchSize = 64, device: Device = "cpu", checkpoint: Checkpoint = "best", strict: Strict = False,
    quiet: Quiet = False,
    shards: Annotated[bool, typer.Option("--shards", help="Write a sharded embedding folder (one shard per "
                                         "process, and manifest.json); implied under torchrun. Needs a bundle.")]
    = False,
) -> None:
    """Embed every image under a folder (sorted paths) into an .npz with arrays `embeddings` and `paths`.

    A folder whose images are all in class subfolders also gets `labels` and `class_names`, so that `dmlplug
    evaluate` reads the .npz; a bundle's .npz records its model (`model_sha256`, `probe`), which `dmlplug index
    --from-embeddings` checks.

    Under torchrun (`torchrun --nproc-per-node N -m dmlplug embed BUNDLE IMAGES --out DIR`), or with --shards,
    each process embeds a disjoint block of the images into DIR/shard-RANK-of-N.npz and rank 0 writes
    DIR/manifest.json once every shard exists; the shards in order equal the single-process .npz.
    """
    import numpy as np

    if shards or int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        from dmlplug.bundle.shard_embed import embed_shards

        manifest = embed_shards(target, images_dir, out, batch_size=batch_size, device=device, strict=strict,
                                progress=lambda total, label: _progress(total, label, quiet), say=_say)
        if os.environ.get("RANK", "0") == "0":
            typer.echo(f"{manifest['total']} embeddings ({manifest['embedding_size']}-d) in "
                       f"{manifest['world_size']} shards written to {out} (manifest.json)")
        return
    from dmlplug.bundle.bundle import open_embedder
    from dmlplug.bundle.embedding_file import MIN_CLASSES, embedding_arrays
    from dmlplug.files import atomic_write

    embedder = open_embedder(target, device=device, checkpoint=checkpoint)
    embeddings, paths = _embed_folder(embedder, images_dir, batch_size=batch_size, strict=strict, quiet=quiet)
    arrays = embedding_arrays(embedder, embeddings, paths, images_dir)
    atomic_write(out, lambda f: np.savez(f, **arrays))
    if "class_names" in arrays:
        labels = (f"labels of {len(arrays['class_names'])} classes (the subfolders of {images_dir}), for dmlplug "
                  "evaluate")
    else:
        labels = (f"no labels: the images are not all in class subfolders of {images_dir} (at least "
                  f"{MIN_CLASSES})")
    typer.echo(f"{len(paths)} embeddings ({embeddings.shape[1]}-d) written to {out}; {labels}")


def cmd_search(
    bundle_dir: Annotated[Path, typer.Argument(help="A bundle folder.", show_default=False)],
    index_dir: Annotated[Path, typer.Argument(help="An index folder from `dmlplug index`.", show_default=False)],
    queries: Annotated[list[Path], typer.Argument(help="Query images, or folders of them (every image under a "
                                                  "folder, recursively, sorted).", show_default=False,
                                                  metavar="QUERY_IMAGE|QUERY_DIR...")],
    k: Annotated[int, typer.Option("--k", min=1, help="Matches per query.")] = 10,
    threshold: Annotated[float | None, typer.Option("--threshold", help="Accept at this cosine similarity "
                                                    "instead of the bundle's calibrated threshold.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the matches as JSON.")] = False,
    device: Device = "cpu",
    rerank: Annotated[str | None, typer.Option(
        "--rerank", metavar="METHOD", help="Re-rank the matches with a re-ranker (`dmlplug list rerankers`: aqe, "
        "dba, krnn …), with parameters as name:k=v,... (e.g. aqe:n=5,alpha=3, krnn:k1=20,k2=6,lambda=0.3,"
        "shortlist=100); docs/reranking.md.",
        show_default=False)] = None,
) -> None:
    """The most similar gallery images for each query, with similarity and accept/reject at the threshold.

    Each match gives the item's id, its file (absolute: openable from any folder) and its path as the index
    stores it (relative to the gallery root the index records).
    """
    from dmlplug.bundle.bundle import load_bundle
    from dmlplug.bundle.index_files import read_index
    from dmlplug.bundle.search import format_results, query_images
    from dmlplug.evaluation.rerank_spec import parse_rerank
    from dmlplug.plugins import get_host

    # The re-ranker is resolved in the command's plugin host, before the model loads: a bad spec fails first.
    spec = None if rerank is None else parse_rerank(rerank, where="--rerank", registry=get_host().registry)
    images = query_images(queries)  # a folder without images fails here, before the model loads
    bundle = load_bundle(bundle_dir, device=device)
    # Checked against the bundle's model by bundle.search, before any query is read.
    index = read_index(index_dir, get_host().registry)
    results = bundle.search(images, index, k=k, threshold=threshold, rerank=spec)
    if as_json:
        typer.echo(json.dumps(results, indent=2))
        return
    typer.echo(format_results(results, threshold if threshold is not None else bundle.threshold))
