"""What ``dmlplug index`` indexes: a gallery with its root and the bundle model it was embedded by.

A folder is embedded by the bundle (``dmlplug/commands/index.py`` does it, with its progress bar); a sharded
embedding is read shard by shard (:mod:`dmlplug.bundle.index_shards`); an ``.npz`` of ``dmlplug embed``
(:mod:`dmlplug.bundle.embedding_file`) is indexed as it is, checked to come from the bundle by the model it
records: the same model file (its sha256, checked against ``bundle.json`` without loading the model), else the
same probe embedding (the same weights in another format: the model is loaded and run once on the probe).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmlplug.bundle.errors import BundleError


@dataclass
class GallerySource:
    """A gallery ready to index.

    Attributes:
        gallery: The vectors and their paths as the index stores them (:class:`~dmlplug.bundle.index.Gallery`).
        root: The gallery root the index records (absolute), or ``None``.
        built_by: What ``index.json`` records of the model (``model_sha256``, ``checkpoint_sha256``, ``probe``).
    """

    gallery: Any
    root: str | None
    built_by: dict[str, Any]


def embeddings_source(bundle_dir: str | Path, npz: str | Path, *, device: str = "cpu",
                      check_size: Callable[[int], Any] = lambda size: None) -> GallerySource:
    """The vectors of an .npz of ``dmlplug embed`` with the bundle at ``bundle_dir``, checked to be its model's.

    Args:
        bundle_dir: The bundle folder.
        npz: The .npz.
        device: Where the model runs, when it must (the .npz records another model file than the bundle's).
        check_size: Called with the embedding size before the .npz is read (the codecs' parameter check).

    Raises:
        BundleError: The bundle is damaged; the .npz is not one of ``dmlplug embed``, records no model (a run
            directory's or an older dmlplug's), was embedded by another model, or holds vectors of another size.
    """
    from dmlplug.bundle.bundle import load_bundle, read_manifest, verified_model_sha256
    from dmlplug.bundle.embedding_file import check_embedded_by, embed_fix, read_embedding_file
    from dmlplug.bundle.gallery_paths import stored_paths
    from dmlplug.bundle.index import MemoryGallery

    folder, manifest = read_manifest(bundle_dir)
    sha256, size = verified_model_sha256(folder, manifest), int(manifest["embedding_size"])
    check_size(size)
    embedded = read_embedding_file(npz, bundle_path=folder)
    built_by: dict[str, Any]
    if embedded.recorded.get("model_sha256") == sha256 and embedded.recorded.get("probe") is not None:
        # The very model file: what it recorded is what the bundle would compute, and the model need not load.
        built_by = {"model_sha256": sha256, "checkpoint_sha256": manifest["source"]["checkpoint_sha256"],
                    "probe": [float(v) for v in embedded.recorded["probe"]]}
    else:
        bundle = load_bundle(folder, device=device)
        check_embedded_by(embedded, bundle, require_record=True)
        built_by = bundle.built_by()
    if embedded.embeddings.shape[1] != size:
        raise BundleError(f"{npz} holds {embedded.embeddings.shape[1]}-d vectors, the bundle {folder} makes "
                          f"{size}-d ones", where=str(npz), fix=embed_fix(folder))
    names = stored_paths(embedded.root, embedded.files) if embedded.root is not None else embedded.paths
    return GallerySource(MemoryGallery(embedded.embeddings, names), embedded.root, built_by)
