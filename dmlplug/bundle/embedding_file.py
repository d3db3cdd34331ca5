"""The ``.npz`` of ``dmlplug embed``: what it holds, and reading it back checked against a bundle.

Arrays (all numbers or strings, read without pickle):

* ``embeddings`` (``N×D`` float32, unit length) and ``paths`` (the image files, starting with the folder as typed);
* ``image_root`` and ``image_root_absolute``: the folder as typed and as an absolute path, so the paths resolve
  from any working directory (:func:`~dmlplug.bundle.gallery_paths.absolute_paths`);
* ``labels`` (``N`` int64) and ``class_names`` when every image lies in a class subfolder of the folder and
  there are at least two: ``labels[i]`` indexes ``class_names``, so ``dmlplug evaluate`` accepts the file;
* from a bundle (not a run directory): ``model_sha256``, ``checkpoint_sha256`` and ``probe`` (the model's
  embedding of the bundle's probe input), which ``dmlplug index --from-embeddings`` and ``index-add`` check.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.bundle.errors import BundleError

#: The arrays that say which model embedded a file.
MODEL_KEYS = ("model_sha256", "checkpoint_sha256", "probe")
#: Fewest class subfolders that make a folder labelled (one folder is a collection, not classes).
MIN_CLASSES = 2


def class_labels(paths: Sequence[str], images_dir: str | Path) -> tuple[np.ndarray, list[str]] | None:
    """``(labels, class names)`` from the first folder of each path under ``images_dir``, or ``None``.

    ``None`` when an image lies directly in ``images_dir`` or fewer than :data:`MIN_CLASSES` subfolders hold
    images: such a folder has no classes to evaluate by.
    """
    first = []
    for path in paths:
        parts = Path(os.path.relpath(path, images_dir)).parts
        if len(parts) < 2:
            return None
        first.append(parts[0])
    names = sorted(set(first))
    if len(names) < MIN_CLASSES:
        return None
    code = {name: i for i, name in enumerate(names)}
    return np.array([code[name] for name in first], dtype=np.int64), names


def embedding_arrays(embedder: Any, embeddings: np.ndarray, paths: Sequence[str],
                     images_dir: str | Path) -> dict[str, Any]:
    """The arrays ``dmlplug embed`` writes for ``embeddings`` of ``paths`` listed under ``images_dir``.

    Args:
        embedder: The bundle (its model is recorded) or a run's embedder (nothing recorded).
        embeddings: ``N×D`` float32.
        paths: The image of each row.
        images_dir: The folder the images were listed under, as typed.
    """
    arrays: dict[str, Any] = {"embeddings": embeddings, "paths": np.asarray(list(paths), dtype=str),
              "image_root": np.asarray(str(images_dir)), "image_root_absolute": np.asarray(os.path.abspath(images_dir))}
    labelled = class_labels(paths, images_dir)
    if labelled is not None:
        arrays["labels"], arrays["class_names"] = labelled[0], np.asarray(labelled[1], dtype=str)
    if hasattr(embedder, "built_by"):
        record = embedder.built_by()
        arrays.update(model_sha256=np.asarray(record["model_sha256"]),
                      checkpoint_sha256=np.asarray(str(record["checkpoint_sha256"])),
                      probe=np.asarray(record["probe"], dtype=np.float64))
    return arrays


@dataclass
class EmbeddingFile:
    """An ``.npz`` of ``dmlplug embed`` as read back.

    Attributes:
        file: The ``.npz``.
        embeddings: ``N×D`` float32.
        paths: The paths as written.
        files: The absolute file of each path.
        root: The absolute folder the images were listed under (``None``: an older file that does not record it).
        recorded: What it records of the model that embedded it (keys of :data:`MODEL_KEYS`; empty: nothing).
    """

    file: Path
    embeddings: np.ndarray
    paths: list[str]
    files: list[str]
    root: str | None
    recorded: dict[str, Any] = field(default_factory=dict)


def embed_fix(bundle_path: Any) -> str:
    """How to get an .npz a bundle accepts."""
    return f"embed the images with this bundle: dmlplug embed {bundle_path} IMAGES_DIR --out EMB.npz"


def read_embedding_file(npz: str | Path, *, bundle_path: Any = "BUNDLE_DIR") -> EmbeddingFile:
    """Read an .npz of ``dmlplug embed``.

    Raises:
        BundleError: Not an .npz with ``embeddings`` (``N×D``) and as many ``paths``.
    """
    from dmlplug.bundle.gallery_paths import absolute_paths

    npz = Path(npz)
    try:
        with np.load(npz, allow_pickle=False) as data:
            vectors = np.asarray(data["embeddings"], dtype=np.float32)
            paths = [str(p) for p in data["paths"]]
            given = str(data["image_root"]) if "image_root" in data.files else None
            root = str(data["image_root_absolute"]) if "image_root_absolute" in data.files else None
            recorded = {key: data[key].tolist() for key in MODEL_KEYS if key in data.files}
    except (OSError, ValueError, KeyError) as exc:
        raise BundleError(f"{npz} is not an .npz of dmlplug embed (embeddings, paths): {exc}", where=str(npz),
                          fix=embed_fix(bundle_path)) from None
    if vectors.ndim != 2 or len(vectors) != len(paths):
        raise BundleError(f"{npz} holds embeddings of shape {vectors.shape} for {len(paths)} paths", where=str(npz),
                          fix=embed_fix(bundle_path))
    return EmbeddingFile(npz, vectors, paths, absolute_paths(paths, given, root), root, recorded)


def check_embedded_by(embedded: EmbeddingFile, bundle: Any, *, require_record: bool = False) -> None:
    """Refuse an .npz that another model than ``bundle``'s embedded.

    An .npz that records its model is checked by its ``model_sha256``, else its ``probe``
    (:func:`~dmlplug.bundle.index_files.other_model`). One that records none (a run directory's, or an older
    dmlplug's) is refused with ``require_record``; otherwise its first image is embedded again, which must give
    its first vector within the probe's tolerance.

    Raises:
        BundleError: Another model embedded it, or (``require_record``) it does not say which model did.
    """
    from dmlplug.bundle.index_files import PROBE_TOLERANCE, other_model

    npz, fix = embedded.file, embed_fix(bundle.path)
    if embedded.recorded:
        why = other_model(embedded.recorded, bundle)
        if why is not None:
            raise BundleError(f"{npz} was embedded by another model than the bundle {bundle.path} loads ({why})",
                              where=str(npz), fix=fix)
        return
    if require_record:
        raise BundleError(f"{npz} does not record the model that embedded it (model_sha256, probe): it was written "
                          "from a run directory or by an older dmlplug", where=str(npz), fix=fix)
    if not embedded.paths:
        return
    first = embedded.paths[0]
    try:
        again = bundle.embed([first])[0]
    except Exception as exc:  # an image moved or unreadable: the origin cannot be checked
        raise BundleError(f"{npz} records no model and its first image {first} cannot be embedded again to "
                          f"check which model embedded it ({exc})", where=str(npz), fix=fix) from None
    vectors = embedded.embeddings
    gap = float(np.abs(again - vectors[0]).max()) if vectors.shape[1] == len(again) else 1.0
    if gap > PROBE_TOLERANCE:
        raise BundleError(f"{npz} was embedded by another model than the bundle {bundle.path} loads: the bundle "
                          f"embeds its first image {first} {gap:.3g} away from its vector", where=str(npz), fix=fix)
