"""Index folders: writing one, and reading one back only after checking it.

An index folder holds ``index.json`` (kind, codec, storage, size, dimension, parameters, measured recall and
bytes per vector, the sha256 of the bundle model and of the checkpoint that built it, the model's embedding of
a fixed probe input, and the size and sha256 of every data file), ``paths.json`` (the path of each label,
``null`` where an item was removed) and ``index.faiss`` (binary codes add ``rescore.faiss``) or
``embeddings.pt``. :func:`read_index` checks each file
against ``index.json`` and the loaded vectors against its size and dimension, so a damaged, truncated or
swapped file is one clear :class:`~dmlplug.bundle.errors.BundleError` rather than a faiss or torch crash.
:func:`check_built_by` refuses to search an index with a bundle whose model did not build it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from dmlplug.bundle.codecs import CODECS, set_search_params
from dmlplug.bundle.errors import BundleError
from dmlplug.bundle.index import CodedIndex, ExactIndex, faiss_module
from dmlplug.bundle.integrity import check_file
from dmlplug.files import write_json

INDEX_FILE, PATHS_FILE = "index.json", "paths.json"
#: The data file of each storage.
DATA_FILES = {"faiss": "index.faiss", "torch": "embeddings.pt"}
#: The file of the float vectors that rescore binary codes.
RESCORE_FILE = "rescore.faiss"
#: The kind index.json records for each codec (``exact`` and the approximate kinds predate the codecs).
KINDS = {codec: "exact" if codec == "float32" else codec for codec in CODECS}
#: index.json keys that describe the folder rather than the index (kept out of ``index.info``).
LAYOUT_KEYS = ("kind", "codec", "storage", "size", "dim", "files")
REBUILD = "build it again: dmlplug index BUNDLE_DIR IMAGES_DIR --out INDEX_DIR"
#: Largest coordinate gap between two models' embeddings of the probe input that still counts as the same
#: weights: formats of one checkpoint differ by about 1e-6 (the export's verification), other weights by 1e-1.
PROBE_TOLERANCE = 1e-3


def save_index(index: ExactIndex | CodedIndex, folder: Path, built_by: dict[str, Any]) -> None:
    """Write ``index`` into the (new, empty) ``folder``: its vectors, ``paths.json`` and ``index.json``.

    Args:
        index: The index.
        folder: The folder (an :func:`~dmlplug.bundle.atomic.atomic_folder`).
        built_by: Provenance for index.json: ``model_sha256`` and ``checkpoint_sha256`` of the bundle.
    """
    from dmlplug.bundle.integrity import file_digest

    storage, data = index.files(folder)
    write_json(folder / PATHS_FILE, index.paths)
    files = {name: {"size": (folder / name).stat().st_size, "sha256": file_digest(folder / name)}
             for name in (*data, PATHS_FILE)}
    info = dict(index.info)
    if index.size:  # what the files hold, measured: after an add or a removal too
        info["bytes_per_vector"] = round(sum((folder / name).stat().st_size for name in data) / index.size, 3)
    write_json(folder / INDEX_FILE, {"kind": index.kind, "codec": index.codec, "storage": storage,
                                     "size": index.size, "dim": index.dim, **info, **built_by, "files": files})


def read_index(folder: str | Path) -> ExactIndex | CodedIndex:
    """Read an index folder written by ``dmlplug index``, checking every file first.

    Raises:
        BundleError: Not an index folder; ``index.json`` or ``paths.json`` unreadable or inconsistent; a data
            file missing, of another size or sha256 than recorded, or unreadable; vectors of another count or
            dimension than recorded; or a faiss index while faiss is not installed.
    """
    folder = Path(folder)
    meta = _read_json(folder / INDEX_FILE, f"{folder} is not a readable index folder")
    _check_layout(meta, folder)
    files = meta.get("files") or {}  # indexes written before dmlplug recorded sizes and digests: not checked
    paths = _read_json(folder / PATHS_FILE, f"the paths file of index {folder} is not readable",
                       files.get(PATHS_FILE))
    holes = meta["kind"] != "exact"  # a coded index keeps the labels of removed items, as null paths
    if (not isinstance(paths, list) or not all(isinstance(p, str) or (holes and p is None) for p in paths)
            or sum(p is not None for p in paths) != meta["size"]):
        raise BundleError(f"{folder / PATHS_FILE} does not list the {meta['size']} image paths index.json records",
                          where=str(folder / PATHS_FILE), fix=REBUILD)
    data = folder / DATA_FILES[meta["storage"]]
    for name in (data.name, RESCORE_FILE) if meta["codec"] == "binary" else (data.name,):
        record = files.get(name) or {}
        check_file(folder / name, size=record.get("size"), sha256=record.get("sha256"), what="the index data file",
                   record="index.json", fix=REBUILD)
    info = {key: value for key, value in meta.items() if key not in LAYOUT_KEYS}
    index = _load_torch(data, meta, paths, info) if meta["storage"] == "torch" else _load_faiss(data, meta, paths,
                                                                                                 info)
    index.folder = folder
    return index


def check_built_by(index: Any, bundle: Any) -> None:
    """Refuse an index that another model built: its vectors are not comparable with the bundle's.

    Accepted: an index built by the bundle's own model file (same sha256), or by a model that embeds the
    bundle's probe input (:meth:`~dmlplug.bundle.bundle.Bundle.probe`) alike within :data:`PROBE_TOLERANCE`,
    i.e. the same weights in another format; an index of an older dmlplug without a probe when it records the
    bundle's checkpoint; and an index that records nothing (built in memory from vectors).

    Args:
        index: The index (its ``info`` holds what index.json records).
        bundle: The loaded :class:`~dmlplug.bundle.bundle.Bundle`.

    Raises:
        BundleError: The index was built by another model.
    """
    info = getattr(index, "info", {}) or {}
    if not any(key in info for key in ("model_sha256", "probe", "checkpoint_sha256")):
        return
    if info.get("model_sha256") == bundle.model_sha256:
        return
    where = getattr(index, "folder", None) or "the index"
    if info.get("probe") is not None:
        recorded = np.asarray(info["probe"], dtype=np.float64)
        ours = bundle.probe()
        gap = float(np.abs(recorded - ours).max()) if recorded.shape == ours.shape else float("inf")
        if gap <= PROBE_TOLERANCE:
            return
        why = f"the bundle embeds the index's probe input {gap:.3g} away from the model that built it"
    elif info.get("checkpoint_sha256") == bundle.manifest["source"]["checkpoint_sha256"]:
        return
    else:
        why = "it records another model and another checkpoint"
    raise BundleError(f"the index {where} was built by another model than the bundle {bundle.path} loads ({why}); "
                      "its vectors are not comparable with the bundle's", where=str(where),
                      fix=f"build the index with this bundle: dmlplug index {bundle.path} IMAGES_DIR --out INDEX_DIR")


def _read_json(path: Path, problem: str, record: dict[str, Any] | None = None) -> Any:
    if record:
        check_file(path, size=record.get("size"), sha256=record.get("sha256"), what="the index file",
                   record="index.json", fix=REBUILD)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(f"{problem}: it has no {path.name}", where=str(path.parent), fix=REBUILD) from None
    except (OSError, ValueError) as exc:  # a folder, no permission, truncated or not JSON
        raise BundleError(f"{problem}: {path.name}: {exc}", where=str(path), fix=REBUILD) from None


def _check_layout(meta: Any, folder: Path) -> None:
    """``index.json`` has the keys and types this dmlplug writes."""
    problem = None
    if isinstance(meta, dict) and "codec" not in meta:  # written before the codecs: the kind says it
        meta["codec"] = {kind: codec for codec, kind in KINDS.items()}.get(str(meta.get("kind")))
    if not isinstance(meta, dict):
        problem = "it is not a JSON object"
    elif KINDS.get(str(meta.get("codec"))) != meta.get("kind") or meta.get("storage") not in DATA_FILES:
        problem = (f"kind {meta.get('kind')!r} / codec {meta.get('codec')!r} / storage {meta.get('storage')!r} is not "
                   "one dmlplug writes")
    elif not all(isinstance(meta.get(key), int) and meta[key] >= (key == "dim") for key in ("size", "dim")):
        problem = f"size {meta.get('size')!r} / dim {meta.get('dim')!r} are not counts"
    elif meta["kind"] != "exact" and meta["storage"] != "faiss":
        problem = f"an {meta['kind']} index must be stored by faiss"
    if problem:
        raise BundleError(f"{folder / INDEX_FILE} is not an index description: {problem}",
                          where=str(folder / INDEX_FILE), fix=REBUILD)


def _mismatch(data: Path, found: str, meta: dict[str, Any]) -> BundleError:
    return BundleError(f"the index data file {data} holds {found}, but index.json records a {meta['kind']} index "
                       f"of {meta['size']} {meta['dim']}-d vectors", where=str(data), fix=REBUILD)


def _load_torch(data: Path, meta: dict[str, Any], paths: list[str], info: dict[str, Any]) -> ExactIndex:
    import torch

    try:
        vectors = torch.load(data, weights_only=True)
    except Exception as exc:  # torch raises RuntimeError, EOFError, pickle and zip errors for a damaged file
        raise BundleError(f"the index data file {data} cannot be read: {type(exc).__name__}: {exc}",
                          where=str(data), fix=REBUILD) from None
    if not isinstance(vectors, torch.Tensor) or vectors.dtype != torch.float32 or tuple(vectors.shape) != (
            meta["size"], meta["dim"]):
        shape = tuple(vectors.shape) if isinstance(vectors, torch.Tensor) else type(vectors).__name__
        raise _mismatch(data, f"{shape}", meta)
    return ExactIndex(vectors.numpy(), paths, info)


def _load_faiss(data: Path, meta: dict[str, Any], paths: list[str | None],
                info: dict[str, Any]) -> ExactIndex | CodedIndex:
    faiss = faiss_module()
    if faiss is None:
        raise BundleError(f"the index in {data.parent} is a faiss index and faiss is not installed",
                          where=str(data.parent), fix="pip install faiss-cpu")
    codec = meta["codec"]
    if codec == "binary":
        from dmlplug.bundle.codecs import BinaryRescored

        codes, vectors = _read(faiss.read_index_binary, data), _read(faiss.read_index, data.parent / RESCORE_FILE)
        if not isinstance(codes, faiss.IndexBinaryIDMap2) or codes.ntotal != meta["size"]:
            raise _mismatch(data, f"a {type(codes).__name__} of {codes.ntotal} codes", meta)
        stored: Any = vectors  # the rescoring vectors are checked as a float index below
    else:
        stored = _read(faiss.read_index, data)
    inner = stored.index if isinstance(stored, faiss.IndexIDMap2) else stored
    expected = {"float32": faiss.IndexFlat, "float16": faiss.IndexScalarQuantizer, "int8": faiss.IndexScalarQuantizer,
                "binary": faiss.IndexFlat, "ivf": faiss.IndexIVFFlat, "pq": faiss.IndexIVFPQ,
                "hnsw": faiss.IndexHNSW}[codec]
    inner = faiss.downcast_index(inner) if isinstance(stored, faiss.IndexIDMap2) else inner
    if codec in ("float16", "int8") and isinstance(inner, faiss.IndexScalarQuantizer):
        wanted = faiss.ScalarQuantizer.QT_fp16 if codec == "float16" else faiss.ScalarQuantizer.QT_8bit
        expected = expected if inner.sq.qtype == wanted else type(None)
    if (not isinstance(inner, expected) or stored.ntotal != meta["size"] or stored.d != meta["dim"]
            or stored.metric_type != faiss.METRIC_INNER_PRODUCT):
        raise _mismatch(data, f"a {type(inner).__name__} of {stored.ntotal} {stored.d}-d vectors", meta)
    if codec == "float32":
        return ExactIndex(stored.reconstruct_n(0, stored.ntotal), [p for p in paths if p is not None], info)
    if codec == "binary":
        stored = BinaryRescored(codes, vectors, 1)  # rescore: set from index.json below
    defaults = {"nprobe": 1, "efSearch": 64, "rescore": 10}  # what an index.json before the codecs left out
    set_search_params(faiss, stored, codec, {key: int(meta.get(key, default)) for key, default in defaults.items()})
    return CodedIndex(stored, codec, paths, info)


def _read(reader: Any, path: Path) -> Any:
    try:
        return reader(str(path))
    except RuntimeError as exc:  # faiss's C++ errors: truncated, not an index
        raise BundleError(f"the index data file {path} cannot be read by faiss: {str(exc).splitlines()[-1]}",
                          where=str(path), fix=REBUILD) from None
