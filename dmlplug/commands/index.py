"""The index commands of the ``dmlplug`` command line: index, index-add, index-remove.

:func:`dmlplug.commands.register_commands` adds them to the app; the work happens in ``dmlplug/bundle/``
(``index*.py``, ``codec_spec.py``) and in the codecs' plugins (``dmlplug list index_codecs``). Only typer is
imported here: numpy, faiss and torch come with the command that runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dmlplug.commands.bundle import BatchSize, Device, Quiet, Strict, _embed_folder, _say

if TYPE_CHECKING:
    from dmlplug.bundle.bundle import Bundle
    from dmlplug.bundle.index_shards import ShardGallery
    from dmlplug.bundle.index_sources import GallerySource


def cmd_index(
    bundle_dir: Annotated[Path, typer.Argument(help="A bundle folder.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", help="The index folder to create (new or empty).",
                                      show_default=False)],
    images_dir: Annotated[Path | None, typer.Argument(help="Gallery folder (searched recursively); leave it out "
                                                      "with --from-shards or --from-embeddings.",
                                                      show_default=False)] = None,
    codec: Annotated[str | None, typer.Option("--codec", metavar="NAME[:KEY=VALUE,...]", help="A registered index "
                                              "codec and its parameters (dmlplug list index_codecs --params): "
                                              "float32 (exact, the default), float16, int8, binary (sign bits in "
                                              "memory, rescored), pq (IVF-PQ), ivf, hnsw; e.g. pq:pq_m=64.")]
    = None,
    budget: Annotated[str | None, typer.Option("--budget", help="Memory budget: bytes per vector (64B) or for the "
                                               "whole index (2GB, 512MiB), in memory; the most accurate codec that "
                                               "fits is chosen, by recall measured on held-out images.")] = None,
    from_shards: Annotated[Path | None, typer.Option("--from-shards", help="Index the shards of a sharded "
                                                     "embedding (its manifest.json, or its folder) instead of "
                                                     "images.", show_default=False)] = None,
    from_embeddings: Annotated[Path | None, typer.Option("--from-embeddings", help="Index the vectors of an .npz "
                                                         "of `dmlplug embed` with this bundle (checked by the model "
                                                         "it records) instead of embedding the images again.",
                                                         show_default=False, metavar="EMB.npz")] = None,
    approximate: Annotated[str | None, typer.Option("--approximate", help="ivf or hnsw: the same as --codec.")]
    = None,
    k: Annotated[int, typer.Option("--k", min=1, help="A further k of the reported recall@k (1 and 10 always).")]
    = 10,
    nlist: Annotated[int | None, typer.Option("--nlist", min=1, help="ivf, pq: inverted lists (default ≈ √N).")]
    = None,
    nprobe: Annotated[int | None, typer.Option("--nprobe", min=1, help="ivf, pq: lists searched per query "
                                               "(default nlist/8, at least 8).")] = None,
    pq_m: Annotated[int | None, typer.Option("--pq-m", min=1, help="pq: sub-vectors, a divisor of the embedding "
                                             "size (default: the largest up to d/4).")] = None,
    pq_nbits: Annotated[int | None, typer.Option("--pq-nbits", min=1, max=16, help="pq: bits per sub-vector "
                                                 "code (default 8).")] = None,
    rescore: Annotated[int | None, typer.Option("--rescore", min=1, help="binary: Hamming candidates rescored, "
                                                "times max(k, 10) (default 10).")] = None,
    ef_search: Annotated[int | None, typer.Option("--ef-search", min=1, help="hnsw: candidates kept while "
                                                  "searching the graph (default max(64, 2k)).")] = None,
    batch_size: BatchSize = 64, device: Device = "cpu", strict: Strict = False, quiet: Quiet = False,
) -> None:
    """Index a gallery folder, an .npz of `dmlplug embed` or a sharded embedding: exact, or a compressed --codec.

    Every index records its bytes per vector in memory and on disk and its recall@1 and @10 against exact search,
    measured on gallery images held out of it while it is built; and its gallery root, the folder its items' paths
    are relative to.
    """
    from dmlplug.bundle.atomic import atomic_folder, check_destination
    from dmlplug.bundle.codec_spec import EXACT_CODEC, budget_codecs, pick_codec
    from dmlplug.bundle.errors import BundleError
    from dmlplug.bundle.gallery_paths import ROOT_KEY
    from dmlplug.bundle.index import build_from
    from dmlplug.bundle.index_budget import choose, format_table, parse_budget
    from dmlplug.bundle.index_files import save_index
    from dmlplug.plugins import get_host

    if codec is not None and approximate is not None and codec != approximate:
        raise BundleError(f"--codec {codec} and --approximate {approximate} ask for two indexes", fix="give one")
    if budget is not None and (codec or approximate) is not None:
        raise BundleError("--budget chooses the codec: give --budget or --codec, not both", fix="leave one out")
    limit = parse_budget(budget) if budget is not None else None
    if sum(given is not None for given in (images_dir, from_shards, from_embeddings)) != 1:
        raise BundleError("index needs a gallery: an IMAGES_DIR, --from-shards MANIFEST or --from-embeddings EMB.npz, "
                          "exactly one", fix="dmlplug index BUNDLE_DIR IMAGES_DIR --out INDEX_DIR, or dmlplug index "
                          "BUNDLE_DIR --from-shards SHARDS_DIR (or --from-embeddings EMB.npz) --out INDEX_DIR")
    fields = {"nlist": nlist, "nprobe": nprobe, "pq_m": pq_m, "pq_nbits": pq_nbits, "rescore": rescore,
              "ef_search": ef_search}
    registry = get_host().registry
    candidates = budget_codecs(registry, **fields) if limit is not None else \
        [pick_codec(codec or approximate or EXACT_CODEC, registry,
                    where="--approximate" if approximate and not codec else "--codec", **fields)]
    check_destination(out, "index")
    source = _gallery_source(bundle_dir, device, images_dir=images_dir, from_shards=from_shards,
                             from_embeddings=from_embeddings, batch_size=batch_size, strict=strict, quiet=quiet,
                             check=lambda size: [c.component.plan(1, size, k) for c in candidates])
    gallery = source.gallery
    table = None
    if limit is not None:
        index, table = choose(gallery, limit, candidates, k=k)
    else:
        index = build_from(gallery, candidates[0], k=k)
    if source.root is not None:
        index.info[ROOT_KEY] = source.root
    with atomic_folder(out, "index") as folder:
        save_index(index, folder, source.built_by)
    if table is not None:
        _say(f"budget {limit.text if limit else ''}: {index.codec}, the most accurate codec that fits in memory "
             f"(recall measured on held-out gallery images):\n{format_table(table, index.codec)}")
    typer.echo(f"{index.kind} index of {index.size} images written to {out}{_describe(index.info)}")


def _describe(info: dict[str, object]) -> str:
    """The codec, bytes per vector and measured recall of an index, as a clause of the closing line."""
    text = f" (codec {info.get('codec')}"
    if "memory_bytes_per_vector" in info:
        text += (f", {info['memory_bytes_per_vector']:.1f} bytes per vector in memory, "
                 f"{info['disk_bytes_per_vector']:.1f} on disk")
    held = info.get("recall_queries")
    if held:
        recalls = ", ".join(f"{key} {value:.4f}" for key, value in info.items()
                            if key.startswith("recall@") and isinstance(value, float))
        return text + f"); against exact search: {recalls} ({held} gallery images held out as queries)"
    if held == 0:
        return text + "); recall not measured (too few images to hold some out as queries)"
    return text + ")"


def _gallery_source(bundle_dir: Path, device: str, *, images_dir: Path | None, from_shards: Path | None,
                    from_embeddings: Path | None, batch_size: int, strict: bool, quiet: bool,
                    check: Callable[[int], object]) -> GallerySource:
    """The gallery ``dmlplug index`` builds from, its root and model record.

    ``check(embedding size)`` runs first: a codec parameter impossible for the embedding size fails before
    anything is embedded or read.
    """
    import os

    from dmlplug.bundle.bundle import load_bundle
    from dmlplug.bundle.index import MemoryGallery
    from dmlplug.bundle.index_sources import GallerySource, embeddings_source

    if from_embeddings is not None:  # the model loads only when the .npz records another model file
        return embeddings_source(bundle_dir, from_embeddings, device=device, check_size=check)
    bundle = load_bundle(bundle_dir, device=device)
    check(bundle.embedding_size)
    if from_shards is not None:
        shards = _shards_of(bundle, from_shards)
        return GallerySource(shards, shards.root, bundle.built_by())
    assert images_dir is not None
    embeddings, paths = _embed_folder(bundle, images_dir, batch_size=batch_size, strict=strict, quiet=quiet)
    root = os.path.abspath(images_dir)
    return GallerySource(MemoryGallery(embeddings, [os.path.relpath(p, images_dir) for p in paths]), root,
                         bundle.built_by())


def _shards_of(bundle: Bundle, source: Path) -> ShardGallery:
    """The shards of ``source``, checked to be embedded by ``bundle``'s model."""
    from dmlplug.bundle.index_shards import shard_gallery

    gallery = shard_gallery(source)
    gallery.shards.check_bundle(bundle.model_sha256, bundle.embedding_size)
    return gallery


def cmd_index_add(
    bundle_dir: Annotated[Path, typer.Argument(help="The bundle that built the index.", show_default=False)],
    index_dir: Annotated[Path, typer.Argument(help="An index folder from `dmlplug index`.", show_default=False)],
    source: Annotated[Path, typer.Argument(help="What to add: a folder of images, an .npz of `dmlplug embed`, or "
                                           "a sharded embedding (its manifest.json or folder).", show_default=False,
                                           metavar="IMAGES_DIR|EMB.npz|SHARDS")],
    batch_size: BatchSize = 64, device: Device = "cpu", strict: Strict = False, quiet: Quiet = False,
) -> None:
    """Add images to an index without rebuilding it (its quantiser is kept); the folder is replaced atomically.

    The new items get new ids; their paths are stored relative to the index's gallery root (absolute when
    outside it).
    """
    import os

    from dmlplug.bundle.bundle import load_bundle
    from dmlplug.bundle.embedding_file import check_embedded_by, read_embedding_file
    from dmlplug.bundle.index_edit import add_files, rewrite
    from dmlplug.bundle.index_files import check_built_by, read_index
    from dmlplug.bundle.index_shards import is_sharded
    from dmlplug.plugins import get_host

    bundle = load_bundle(bundle_dir, device=device)
    index = read_index(index_dir, get_host().registry)
    check_built_by(index, bundle)
    before = index.size
    if is_sharded(source):
        shards = _shards_of(bundle, source)
        for shard in shards.shards:
            add_files(index, shard.embeddings, shards.files(shard.paths))
    elif source.is_file():
        embedded = read_embedding_file(source, bundle_path=bundle.path)
        check_embedded_by(embedded, bundle)
        add_files(index, embedded.embeddings, embedded.files)
    else:
        vectors, paths = _embed_folder(bundle, source, batch_size=batch_size, strict=strict, quiet=quiet)
        add_files(index, vectors, [os.path.abspath(p) for p in paths])
    rewrite(index, index_dir)
    typer.echo(f"{index.size - before} images added to {index_dir}: {index.size} in all")


def cmd_index_remove(
    index_dir: Annotated[Path, typer.Argument(help="An index folder from `dmlplug index`.", show_default=False)],
    paths_file: Annotated[Path, typer.Argument(help="A text file of the items to remove, one per line: a path as "
                                               "the index stores it, the image file (absolute or relative to "
                                               "here), or an id of `dmlplug search`.", show_default=False)],
) -> None:
    """Remove images from an index without rebuilding it; the folder is replaced atomically."""
    from dmlplug.bundle.errors import BundleError
    from dmlplug.bundle.index_edit import remove_items, rewrite
    from dmlplug.bundle.index_files import read_index
    from dmlplug.plugins import get_host

    try:
        lines = paths_file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"cannot read the paths to remove from {paths_file}: {exc}", where=str(paths_file),
                          fix="give a text file with one image path (or id) per line") from None
    items = [line.strip() for line in lines if line.strip()]
    index = read_index(index_dir, get_host().registry)
    removed = remove_items(index, items)
    rewrite(index, index_dir)
    typer.echo(f"{len(removed)} images removed from {index_dir}: {index.size} left")
