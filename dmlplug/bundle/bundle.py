"""Using a bundle (or a run directory) from Python: :func:`load_bundle`, :meth:`Bundle.embed`, :meth:`Bundle.search`.

Example::

    bundle = dmlplug.load_bundle("bundles/quickstart")
    vectors = bundle.embed(["a.png", "b.png"])          # N×D float32, unit length
    index = bundle.build_index(["gallery/1.png", ...])  # or dmlplug.bundle.index_files.read_index(folder)
    results = bundle.search(["query.png"], index, k=5)

Loading verifies what it loads (docs/bundle.md, "Errors"): ``bundle.json`` must have the layout this dmlplug
writes, the model file the size and sha256 it records (hashed once per process,
:mod:`dmlplug.bundle.integrity`), and the model the input and embedding sizes it records; an index must have
been built by this model (or this checkpoint) and hold vectors of the bundle's embedding size.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.bundle.errors import BundleError, require_onnx
from dmlplug.bundle.images import LoadedBatch, Unreadable, load_batches, load_image
from dmlplug.bundle.integrity import check_file
from dmlplug.bundle.preprocess import preprocess_batch

#: The file that makes a folder a bundle.
MANIFEST = "bundle.json"
#: What ``bundle.json`` says it is, and the layout version this dmlplug reads and writes.
FORMAT, FORMAT_VERSION = "dmlplug-bundle", 1
#: Model file name per format.
MODEL_FILES = {"onnx": "model.onnx", "torchscript": "model.pt"}
#: How to get a good bundle again.
EXPORT_AGAIN = "export it again: dmlplug export RUN_DIR --out BUNDLE_DIR"
#: Seed of the probe input whose embedding identifies a model's weights whatever the file format.
PROBE_SEED = 0


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
        out = []
        for start in range(0, len(images), batch_size):
            chunk = [image if not isinstance(image, str | Path) else _load_or_fail(image)
                     for image in images[start:start + batch_size]]
            out.append(self.run(self.preprocess(chunk)))
        if not out:
            raise BundleError("no image to embed", fix="give at least one image")
        return np.concatenate(out)

    def preprocess(self, images: Sequence[Any]) -> np.ndarray:
        """The first half of :meth:`embed`: PIL images to the model's float32 ``B×3×H×W`` input.

        With :meth:`run`, for a caller that overlaps the two halves (a server preparing the next batch on its event
        loop while the model runs in a thread); ``run(preprocess(images))`` is ``embed(images)``.
        """
        return preprocess_batch(self.transform, images)

    def run(self, batch: Any) -> np.ndarray:
        """The second half of :meth:`embed`: the model on a preprocessed batch, ``B×D`` float32."""
        return np.asarray(self.runner(batch), dtype=np.float32)

    def embed_files(self, paths: Sequence[str], *, batch_size: int = 64, strict: bool = False,
                    progress: Callable[[int], None] | None = None,
                    allow_empty: bool = False) -> tuple[np.ndarray, list[str], list[Unreadable]]:
        """Embed image files, skipping the unreadable ones (or failing on them with ``strict``).

        Args:
            paths: Image files.
            batch_size: Images per forward pass.
            strict: Fail at the first unreadable file instead of skipping it.
            progress: Called with the number of files done after each batch.
            allow_empty: When no file can be read, return an empty ``0×0`` array instead of failing (a shard of
                a larger folder may hold only unreadable files).

        Returns:
            ``(embeddings N×D, the N paths embedded, the unreadable files)``.
        """
        chunks: list[np.ndarray] = []
        kept: list[str] = []
        failures: list[Unreadable] = []
        batch: LoadedBatch
        for batch in load_batches(paths, batch_size, strict=strict):
            failures.extend(batch.failures)
            if batch.images:
                chunks.append(self.run(self.preprocess(batch.images)))
                kept.extend(batch.paths)
            if progress is not None:
                progress(len(batch.paths) + len(batch.failures))
        if not chunks:
            if allow_empty:
                return np.empty((0, 0), dtype=np.float32), kept, failures
            raise BundleError(f"none of the {len(paths)} images could be read", fix="check the image files")
        return np.concatenate(chunks), kept, failures


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
        model_sha256: The sha256 of the model file loaded (checked against ``bundle.json``).

    Raises:
        BundleError: The model file is missing, of another size or sha256 than ``bundle.json`` records, cannot
            be loaded, or takes or makes other sizes than recorded; or the ONNX packages are missing.
    """

    def __init__(self, path: Path, manifest: dict[str, Any], device: str = "cpu", threads: int | None = None):
        from dmlplug.bundle.preprocess import build_preprocess
        from dmlplug.bundle.runtime import load_model

        self.path = path
        self.manifest = manifest
        record = manifest["model"]
        if record["format"] == "onnx":
            require_onnx()  # before hashing: say what to install at once
        model = path / record["file"]
        self.model_sha256 = verified_model_sha256(path, manifest)
        runner = load_model(model, record["format"], device, input_size=manifest["input_size"],
                            embedding_size=self.embedding_size, threads=threads)
        super().__init__(build_preprocess(manifest["preprocessing"]), self._checked(runner), str(path))
        self.threshold = default_threshold(manifest)

    def _checked(self, runner: Callable[[Any], np.ndarray]) -> Callable[[Any], np.ndarray]:
        """``runner``, failing clearly when the model makes embeddings of another size than bundle.json says."""
        def run(batch: Any) -> np.ndarray:
            out = runner(batch)
            if out.ndim != 2 or out.shape[1] != self.embedding_size:
                raise BundleError(f"the bundle's model makes embeddings of shape {tuple(out.shape[1:])}, but "
                                  f"{MANIFEST} records {self.embedding_size}-d ones", where=str(self.path),
                                  fix=EXPORT_AGAIN)
            return out

        return run

    def probe(self) -> np.ndarray:
        """The embedding of a fixed, seeded noise input (``D`` floats): a fingerprint of the model's weights.

        Two bundles of the same weights give it within rounding (about 1e-6) whatever their format; another
        model gives another vector. An index records it, so a bundle can tell whether its model built the index.
        """
        import torch

        shape = (1, *self.manifest["input_size"])
        noise = np.random.default_rng(PROBE_SEED).standard_normal(shape).astype(np.float32)
        return np.asarray(self.runner(torch.from_numpy(noise))[0], dtype=np.float64)

    def built_by(self) -> dict[str, Any]:
        """What an index built by this bundle records: its model's sha256 and probe, the checkpoint's sha256."""
        return {"model_sha256": self.model_sha256, "checkpoint_sha256": self.manifest["source"]["checkpoint_sha256"],
                "probe": [float(v) for v in self.probe()]}

    @property
    def embedding_size(self) -> int:
        """Length of an embedding."""
        return int(self.manifest["embedding_size"])

    def build_index(self, images: Sequence[Any], *, paths: Sequence[str] | None = None) -> Any:
        """An exact in-memory index of ``images`` (paths or PIL images; ``paths`` names them in results)."""
        from dmlplug.bundle.index import ExactIndex

        names = list(paths) if paths is not None else [str(i) for i in images]
        return ExactIndex.build(self.embed(images), names, self.built_by())

    def search(self, queries: Sequence[Any], index: Any, *, k: int = 10, threshold: float | None = None,
               names: Sequence[str] | None = None, rerank: Any = None) -> list[dict[str, Any]]:
        """The ``k`` most similar indexed images for each query, accepted at the calibrated threshold.

        Args:
            queries: Query images (paths or PIL images).
            index: An index from :meth:`build_index` or :func:`dmlplug.bundle.index_files.read_index`, or a folder.
            k: Matches per query.
            threshold: Cosine-similarity threshold; defaults to :attr:`threshold`.
            names: How queries are named in the result (defaults to their paths).
            rerank: A re-ranker, ``"aqe"``, ``"dba:n=5"``, ``"krnn:k1=20"``, ``{"name": ..., ...}`` (looked up in
                the process-wide plugin host) or a :class:`~dmlplug.evaluation.rerank_spec.RerankSpec`
                (docs/reranking.md): it reorders the matches; similarities stay query·match cosines.

        Returns:
            ``[{"query": name, "matches": [{"id", "path", "stored_path", "similarity", "accepted"}, ...]}, ...]``,
            most similar first (:mod:`dmlplug.bundle.search`); ``accepted`` is ``None`` when there is no
            threshold.

        Raises:
            BundleError: The index is damaged, was built by another model (and checkpoint), or holds vectors of
                another size; a query cannot be read; ``rerank`` needs float32 vectors the index does not keep.
            ComponentError: ``rerank`` names no registered re-ranker.
            RecipeError: ``rerank`` has invalid parameters.
        """
        from dmlplug.bundle.index_files import read_index
        from dmlplug.bundle.search import check_searchable, search_vectors
        from dmlplug.evaluation.rerank_spec import RerankSpec, parse_rerank

        spec = rerank
        if rerank is not None and not isinstance(rerank, RerankSpec):
            from dmlplug.plugins import get_host

            # A Python caller's entry point (`dmlplug search` hands a spec over): the process-wide plugins.
            spec = parse_rerank(rerank, where="rerank", registry=get_host().registry)

        if isinstance(index, str | Path):
            from dmlplug.plugins import get_host

            # A Python caller's folder: its codec is looked up among the process-wide plugins' (as --rerank's is).
            index = read_index(index, get_host().registry)
        check_searchable(self, index)
        if spec is not None:
            from dmlplug.bundle.rerank_search import check_rerankable

            check_rerankable(index, spec)  # an index that cannot re-rank is refused before any query is embedded
        labels = [str(names[i] if names is not None else query) for i, query in enumerate(queries)]
        return search_vectors(index, self.embed(queries), labels, k=k,
                              threshold=threshold if threshold is not None else self.threshold, rerank=spec)


def default_threshold(manifest: dict[str, Any]) -> float | None:
    """The threshold ``search`` uses: ``thresholds[thresholds["default"]]`` of ``bundle.json``, if any."""
    thresholds = manifest.get("thresholds") or {}
    name = thresholds.get("default")
    value = (thresholds.get("values") or {}).get(name) if name else None
    return float(value) if value is not None else None


def read_manifest(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """``(folder, bundle.json as a dict)`` after checking that it is a bundle.json of a known layout.

    Raises:
        BundleError: Not a bundle, another layout version, or a bundle.json without the keys this version
            writes.
    """
    folder = Path(path)
    file = folder / MANIFEST
    if not file.is_file():
        raise BundleError(f"{folder} is not a bundle: it has no {MANIFEST}", where=str(folder), fix=EXPORT_AGAIN)
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BundleError(f"{file} is not readable JSON: {exc}", where=str(file), fix=EXPORT_AGAIN) from None
    if not isinstance(manifest, dict):
        raise BundleError(f"{file} is not a JSON object", where=str(file), fix=EXPORT_AGAIN)
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise BundleError(
            f"{file} is bundle format {manifest.get('format')!r} version {manifest.get('format_version')!r} "
            f"(written by dmlplug {manifest.get('dmlplug_version', '?')}); this dmlplug reads {FORMAT!r} version "
            f"{FORMAT_VERSION}", where=str(file), fix=f"use the dmlplug version that wrote it, or {EXPORT_AGAIN}")
    problem = _layout_problem(manifest)
    if problem:
        raise BundleError(f"{file} is damaged: {problem}", where=str(file), fix=EXPORT_AGAIN)
    return folder, manifest


def _layout_problem(manifest: dict[str, Any]) -> str | None:
    """What keeps ``manifest`` from being a bundle.json this dmlplug wrote, or ``None``."""
    model = manifest.get("model")
    if not isinstance(model, dict) or MODEL_FILES.get(str(model.get("format"))) != model.get("file"):
        return "its `model` does not name a model file of a known format (onnx: model.onnx, torchscript: model.pt)"
    if not isinstance(model.get("sha256"), str) or not isinstance(model.get("size", 0), int):
        return "its `model` has no sha256 (or a size that is not a number of bytes)"
    size = manifest.get("embedding_size")
    if not isinstance(size, int) or size < 1:
        return f"`embedding_size` is {size!r}, not a positive integer"
    shape = manifest.get("input_size")
    if not (isinstance(shape, list) and len(shape) == 3 and all(isinstance(v, int) and v > 0 for v in shape)):
        return f"`input_size` is {shape!r}, not [3, H, W]"
    if not isinstance(manifest.get("preprocessing"), dict) or not isinstance(manifest["preprocessing"].get("steps"),
                                                                             list):
        return "it has no `preprocessing` steps"
    if not isinstance(manifest.get("source"), dict) or "checkpoint_sha256" not in manifest["source"]:
        return "its `source` does not record the checkpoint's sha256"
    return None


def verified_model_sha256(folder: Path, manifest: dict[str, Any]) -> str:
    """The sha256 of the bundle's model file, checked against ``bundle.json`` (size and digest), without loading it.

    Raises:
        BundleError: The model file is missing, or of another size or sha256 than ``bundle.json`` records.
    """
    record = manifest["model"]
    return check_file(folder / record["file"], size=record.get("size"), sha256=record["sha256"],
                      what="the bundle's model file", record=MANIFEST, fix=EXPORT_AGAIN)


def load_bundle(path: str | Path, *, device: str = "cpu", threads: int | None = None) -> Bundle:
    """Load a bundle folder written by ``dmlplug export``; see :func:`dmlplug.load_bundle`.

    ``threads``: ONNX Runtime's, as :func:`dmlplug.bundle.api.load_bundle` says.
    """
    folder, manifest = read_manifest(path)
    return Bundle(folder, manifest, device, threads)


def load_run_embedder(path: str | Path, *, checkpoint: str = "best", device: str = "cpu") -> Embedder:
    """An :class:`Embedder` with a run's own PyTorch model and test transform (the reference for a bundle)."""
    from dmlplug.bundle.runtime import EmbeddingNet, TorchRunner
    from dmlplug.engine.trained_run import load_run

    loaded = load_run(path, checkpoint=checkpoint, device=device)
    return Embedder(loaded.test_transform, TorchRunner(EmbeddingNet(loaded.model), device), str(path))


def open_embedder(path: str | Path, *, device: str = "cpu", checkpoint: str = "best") -> Embedder:
    """A bundle when ``path`` holds ``bundle.json``, else a run directory or checkpoint file.

    Raises:
        BundleError: ``path`` is a folder that is neither: a bundle folder that lost its ``bundle.json`` (it
            holds a model file) or a folder with neither ``bundle.json`` nor a run's files.
    """
    folder = Path(path)
    if (folder / MANIFEST).is_file():
        return load_bundle(folder, device=device)
    if folder.is_dir():
        _refuse_non_run_folder(folder)
    return load_run_embedder(path, checkpoint=checkpoint, device=device)


def _refuse_non_run_folder(folder: Path) -> None:
    """A folder without ``bundle.json`` is read as a run directory only when it has a run's files."""
    from dmlplug.engine import rundir

    if any((folder / name).exists() for name in (rundir.CHECKPOINTS, rundir.RESULTS, rundir.RESOLVED_RECIPE)):
        return
    models = [name for name in MODEL_FILES.values() if (folder / name).is_file()]
    if models:
        raise BundleError(f"{folder} is a bundle folder without its {MANIFEST} (it holds {models[0]}): the model "
                          "cannot be used without the preprocessing and sizes bundle.json records",
                          where=str(folder), fix=f"restore {MANIFEST} from the exported bundle, or {EXPORT_AGAIN}")
    raise BundleError(f"{folder} is neither a bundle (no {MANIFEST}) nor a run directory (no "
                      f"{rundir.CHECKPOINTS}/, {rundir.RESULTS} or {rundir.RESOLVED_RECIPE})", where=str(folder),
                      fix="give a bundle folder written by `dmlplug export`, or a run directory of `dmlplug run`")
