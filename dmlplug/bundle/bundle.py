"""Using a bundle (or a run directory) from Python: :func:`load_bundle`, :meth:`Bundle.embed`, :meth:`Bundle.search`.

Example::

    bundle = dmlplug.load_bundle("bundles/quickstart")
    vectors = bundle.embed(["a.png", "b.png"])          # N×D float32, unit length
    index = bundle.build_index(["gallery/1.png", ...])  # or dmlplug.bundle.index.load_index(folder)
    results = bundle.search(["query.png"], index, k=5)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.bundle.errors import BundleError, require_onnx
from dmlplug.bundle.images import LoadedBatch, Unreadable, load_batches, load_image

#: The file that makes a folder a bundle.
MANIFEST = "bundle.json"
#: What ``bundle.json`` says it is, and the layout version this dmlplug reads and writes.
FORMAT, FORMAT_VERSION = "dmlplug-bundle", 1
#: Model file name per format.
MODEL_FILES = {"onnx": "model.onnx", "torchscript": "model.pt"}


class Embedder:
    """Turns images into unit-length embeddings with a preprocessing transform and a runner.

    Args:
        transform: PIL image -> ``3×H×W`` tensor (the run's test transform).
        runner: ``B×3×H×W`` tensor -> ``B×D`` numpy array (see :mod:`dmlplug.bundle.runtime`).
        source: What the embedder was loaded from, for messages.
    """

    def __init__(self, transform: Callable[[Any], Any], runner: Callable[[Any], np.ndarray], source: str):
        self.transform = transform
        self.runner = runner
        self.source = source

    def embed(self, images: Sequence[Any], *, batch_size: int = 64) -> np.ndarray:
        """Embed images given as paths or PIL images; ``N×D`` float32, rows in input order.

        Raises:
            BundleError: A path cannot be read as an image.
        """
        import torch

        out = []
        for start in range(0, len(images), batch_size):
            chunk = [image if not isinstance(image, str | Path) else _load_or_fail(image)
                     for image in images[start:start + batch_size]]
            out.append(self.runner(torch.stack([self.transform(image) for image in chunk])))
        if not out:
            raise BundleError("no image to embed", fix="give at least one image")
        return np.concatenate(out).astype(np.float32)

    def embed_files(self, paths: Sequence[str], *, batch_size: int = 64, strict: bool = False,
                    progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, list[str], list[Unreadable]]:
        """Embed image files, skipping the unreadable ones (or failing on them with ``strict``).

        Args:
            paths: Image files.
            batch_size: Images per forward pass.
            strict: Fail at the first unreadable file instead of skipping it.
            progress: Called with the number of files done after each batch.

        Returns:
            ``(embeddings N×D, the N paths embedded, the unreadable files)``.
        """
        import torch

        chunks: list[np.ndarray] = []
        kept: list[str] = []
        failures: list[Unreadable] = []
        batch: LoadedBatch
        for batch in load_batches(paths, batch_size, strict=strict):
            failures.extend(batch.failures)
            if batch.images:
                chunks.append(self.runner(torch.stack([self.transform(image) for image in batch.images])))
                kept.extend(batch.paths)
            if progress is not None:
                progress(len(batch.paths) + len(batch.failures))
        if not chunks:
            raise BundleError(f"none of the {len(paths)} images could be read", fix="check the image files")
        return np.concatenate(chunks).astype(np.float32), kept, failures


def _load_or_fail(path: str | Path) -> Any:
    try:
        return load_image(path)
    except Exception as exc:  # any decoder failure
        raise BundleError(f"cannot read image {path}: {type(exc).__name__}: {exc}", where=str(path),
                          fix="give an image file Pillow can read") from None


class Bundle(Embedder):
    """An exported model with its preprocessing and calibrated thresholds (see docs/bundle.md).

    Attributes:
        path: The bundle folder.
        manifest: ``bundle.json`` as a dict.
        threshold: The similarity threshold ``search`` accepts matches at (``None`` when not calibrated).
    """

    def __init__(self, path: Path, manifest: dict[str, Any], device: str = "cpu"):
        from dmlplug.bundle.preprocess import build_preprocess
        from dmlplug.bundle.runtime import OnnxRunner, load_torchscript

        self.path = path
        self.manifest = manifest
        model = path / manifest["model"]["file"]
        if manifest["model"]["format"] == "onnx":
            require_onnx()
            runner: Callable[[Any], np.ndarray] = OnnxRunner(model, device)
        else:
            runner = load_torchscript(model, device)
        super().__init__(build_preprocess(manifest["preprocessing"]), runner, str(path))
        self.threshold = default_threshold(manifest)

    @property
    def embedding_size(self) -> int:
        """Length of an embedding."""
        return int(self.manifest["embedding_size"])

    def build_index(self, images: Sequence[Any], *, paths: Sequence[str] | None = None) -> Any:
        """An exact in-memory index of ``images`` (paths or PIL images; ``paths`` names them in results)."""
        from dmlplug.bundle.index import ExactIndex

        names = list(paths) if paths is not None else [str(i) for i in images]
        return ExactIndex.build(self.embed(images), names)

    def search(self, queries: Sequence[Any], index: Any, *, k: int = 10, threshold: float | None = None,
               names: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The ``k`` most similar indexed images for each query, accepted at the calibrated threshold.

        Args:
            queries: Query images (paths or PIL images).
            index: An index from :meth:`build_index` or :func:`dmlplug.bundle.index.load_index`, or a folder.
            k: Matches per query.
            threshold: Cosine-similarity threshold; defaults to :attr:`threshold`.
            names: How queries are named in the result (defaults to their paths).

        Returns:
            ``[{"query": name, "matches": [{"path", "similarity", "accepted"}, ...]}, ...]``, most similar
            first; ``accepted`` is ``None`` when there is no threshold.
        """
        from dmlplug.bundle.index import load_index

        if isinstance(index, str | Path):
            index = load_index(index)
        if index.dim != self.embedding_size:
            raise BundleError(f"the index holds {index.dim}-d embeddings, the bundle makes {self.embedding_size}-d",
                              fix="build the index with this bundle: dmlplug index BUNDLE IMAGES --out INDEX")
        limit = threshold if threshold is not None else self.threshold
        similarities, rows = index.search(self.embed(queries), k)
        results = []
        for i, query in enumerate(queries):
            matches = [{"path": index.paths[r], "similarity": float(s),
                        "accepted": None if limit is None else bool(s >= limit)}
                       for s, r in zip(similarities[i], rows[i], strict=True) if r >= 0]
            results.append({"query": str(names[i] if names is not None else query), "matches": matches})
        return results


def default_threshold(manifest: dict[str, Any]) -> float | None:
    """The threshold ``search`` uses: ``thresholds[thresholds["default"]]`` of ``bundle.json``, if any."""
    thresholds = manifest.get("thresholds") or {}
    name = thresholds.get("default")
    value = (thresholds.get("values") or {}).get(name) if name else None
    return float(value) if value is not None else None


def read_manifest(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """``(folder, bundle.json as a dict)`` after checking that the bundle is complete and of a known format.

    Raises:
        BundleError: Not a bundle, another layout version, or the model file is missing.
    """
    folder = Path(path)
    file = folder / MANIFEST
    fix = "export it again: dmlplug export RUN_DIR --out BUNDLE_DIR"
    if not file.is_file():
        raise BundleError(f"{folder} is not a bundle: it has no {MANIFEST}", where=str(folder), fix=fix)
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BundleError(f"{file} is not readable JSON: {exc}", where=str(file), fix=fix) from None
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise BundleError(
            f"{file} is bundle format {manifest.get('format')!r} version {manifest.get('format_version')!r} "
            f"(written by dmlplug {manifest.get('dmlplug_version', '?')}); this dmlplug reads {FORMAT!r} version "
            f"{FORMAT_VERSION}", where=str(file), fix=f"use the dmlplug version that wrote it, or {fix}")
    model = folder / manifest["model"]["file"]
    if not model.is_file():
        raise BundleError(f"the bundle's model file {model.name} is missing", where=str(folder), fix=fix)
    return folder, manifest


def load_bundle(path: str | Path, *, device: str = "cpu") -> Bundle:
    """Load a bundle folder written by ``dmlplug export``; see :func:`dmlplug.load_bundle`."""
    folder, manifest = read_manifest(path)
    return Bundle(folder, manifest, device)


def load_run_embedder(path: str | Path, *, checkpoint: str = "best", device: str = "cpu") -> Embedder:
    """An :class:`Embedder` with a run's own PyTorch model and test transform (the reference for a bundle)."""
    from dmlplug.bundle.runtime import EmbeddingNet, TorchRunner
    from dmlplug.engine.trained_run import load_run

    loaded = load_run(path, checkpoint=checkpoint, device=device)
    return Embedder(loaded.test_transform, TorchRunner(EmbeddingNet(loaded.model), device), str(path))


def open_embedder(path: str | Path, *, device: str = "cpu", checkpoint: str = "best") -> Embedder:
    """A bundle when ``path`` holds ``bundle.json``, else a run directory or checkpoint file."""
    if (Path(path) / MANIFEST).is_file():
        return load_bundle(path, device=device)
    return load_run_embedder(path, checkpoint=checkpoint, device=device)
