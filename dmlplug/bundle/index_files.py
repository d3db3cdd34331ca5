"""Index folders: writing one, and reading one back only after checking it.

An index folder holds ``index.json`` (kind, codec, storage, size, dimension, parameters, measured recall and
bytes per vector in memory and on disk, the sha256 of the bundle model and of the checkpoint that built it, the
model's embedding of a fixed probe input, and the size and sha256 of every data file), ``paths.json`` (the path
of each label, i.e. of each item's id, relative to the gallery ``root`` when index.json records one, ``null``
where an item was removed) and the data files: ``index.faiss`` or ``embeddings.pt`` for
the exact index, what its codec writes for the others (``index.faiss`` first). :func:`read_index` checks each
file against ``index.json`` and the loaded index against its size and dimension, so a damaged, truncated or
swapped file is one clear :class:`~dmlplug.bundle.errors.BundleError` rather than a faiss or torch crash.
:func:`check_built_by` refuses to search an index with a bundle whose model did not build it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dmlplug.bundle.atomic import recover_folder
from dmlplug.bundle.codec_spec import EXACT_CODEC, recorded_codec
from dmlplug.bundle.errors import BundleError, faiss_module
from dmlplug.bundle.index import CodedIndex, ExactIndex
from dmlplug.bundle.integrity import check_file
from dmlplug.files import write_json

if TYPE_CHECKING:
    from dmlplug.registry import Registry

INDEX_FILE, PATHS_FILE = "index.json", "paths.json"
#: The data file of each storage of the exact index (a coded index is stored by its codec: ``faiss``).
DATA_FILES = {"faiss": "index.faiss", "torch": "embeddings.pt"}
#: The kind index.json records for the exact index; a coded index's kind is its codec.
EXACT_KIND = "exact"
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
    info.pop("bytes_per_vector", None)  # an index.json before dmlplug told memory and disk apart
    if index.size:  # measured: after an add or a removal too; on disk, what the files hold
        info["memory_bytes_per_vector"] = round(index.sizes()[0] / index.size, 3)
        info["disk_bytes_per_vector"] = round(sum((folder / name).stat().st_size for name in data) / index.size, 3)
    write_json(folder / INDEX_FILE, {"kind": index.kind, "codec": index.codec, "storage": storage,
                                     "size": index.size, "dim": index.dim, **info, **built_by, "files": files})


def read_index(folder: str | Path, registry: Registry | None = None) -> ExactIndex | CodedIndex:
    """Read an index folder written by ``dmlplug index``, checking every file first.

    Args:
        folder: The index folder.
        registry: Where the codec of a coded index is looked up (an exact index needs none): the command line
            passes its plugin host's.

    Raises:
        BundleError: Not an index folder; ``index.json`` or ``paths.json`` unreadable or inconsistent; a data
            file missing, of another size or sha256 than recorded, or unreadable; vectors of another count or
            dimension than recorded; a coded index without a registry that has its codec; or a faiss index while
            faiss is not installed.
    """
    folder = Path(folder)
    recover_folder(folder)  # a writer killed mid-swap, where the atomic exchange is missing (atomic.py)
    meta = _read_json(folder / INDEX_FILE, f"{folder} is not a readable index folder")
    _check_layout(meta, folder)
    files = meta.get("files") or {}  # indexes written before dmlplug recorded sizes and digests: not checked
    paths = _read_json(folder / PATHS_FILE, f"the paths file of index {folder} is not readable",
                       files.get(PATHS_FILE))
    exact = meta["kind"] == EXACT_KIND
    if (not isinstance(paths, list) or not all(isinstance(p, str) or p is None for p in paths)
            or sum(p is not None for p in paths) != meta["size"]):
        raise BundleError(f"{folder / PATHS_FILE} does not list the {meta['size']} image paths index.json records",
                          where=str(folder / PATHS_FILE), fix=REBUILD)
    info = {key: value for key, value in meta.items() if key not in LAYOUT_KEYS}
    index: ExactIndex | CodedIndex
    if exact:
        data = folder / DATA_FILES[meta["storage"]]
        _check_files(folder, [data.name], files)
        index = _load_torch(data, meta, paths, info) if meta["storage"] == "torch" else _load_exact(data, meta, paths,
                                                                                                      info)
    else:
        codec = recorded_codec(meta["codec"], meta, registry, str(folder))
        _check_files(folder, [name for name in files if name != PATHS_FILE], files)
        index = CodedIndex(_load_coded(codec.component, folder, meta), codec, paths, info)
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
    why = other_model(info, bundle)
    if why is None:
        return
    where = getattr(index, "folder", None) or "the index"
    raise BundleError(f"the index {where} was built by another model than the bundle {bundle.path} loads ({why}); "
                      "its vectors are not comparable with the bundle's", where=str(where),
                      fix=f"build the index with this bundle: dmlplug index {bundle.path} IMAGES_DIR --out INDEX_DIR")


def other_model(recorded: dict[str, Any], bundle: Any) -> str | None:
    """Why the model ``recorded`` names (``model_sha256``, ``probe``, ``checkpoint_sha256``) is not ``bundle``'s.

    ``None`` when it is the bundle's: the same model file, else the same probe embedding within
    :data:`PROBE_TOLERANCE` (the model runs only then), else, without a probe, the same checkpoint.
    """
    if recorded.get("model_sha256") == bundle.model_sha256:
        return None
    if recorded.get("probe") is not None:
        theirs = np.asarray(recorded["probe"], dtype=np.float64)
        ours = bundle.probe()
        gap = float(np.abs(theirs - ours).max()) if theirs.shape == ours.shape else float("inf")
        if gap <= PROBE_TOLERANCE:
            return None
        return f"the bundle embeds the probe input {gap:.3g} away from the model that recorded it"
    if recorded.get("checkpoint_sha256") == bundle.manifest["source"]["checkpoint_sha256"]:
        return None
    return "it records another model and another checkpoint"


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
        meta["codec"] = EXACT_CODEC if meta.get("kind") == EXACT_KIND else meta.get("kind")
    if not isinstance(meta, dict):
        problem = "it is not a JSON object"
    elif not isinstance(meta.get("codec"), str) or meta.get("kind") not in (EXACT_KIND, meta["codec"]) or (
            meta.get("storage") not in (DATA_FILES if meta["kind"] == EXACT_KIND else ("faiss",))):
        problem = (f"kind {meta.get('kind')!r} / codec {meta.get('codec')!r} / storage {meta.get('storage')!r} is not "
                   "one dmlplug writes")
    elif not all(isinstance(meta.get(key), int) and meta[key] >= (key == "dim") for key in ("size", "dim")):
        problem = f"size {meta.get('size')!r} / dim {meta.get('dim')!r} are not counts"
    if problem:
        raise BundleError(f"{folder / INDEX_FILE} is not an index description: {problem}",
                          where=str(folder / INDEX_FILE), fix=REBUILD)


def _check_files(folder: Path, names: list[str], files: dict[str, Any]) -> None:
    for name in names:
        record = files.get(name) or {}
        check_file(folder / name, size=record.get("size"), sha256=record.get("sha256"), what="the index data file",
                   record="index.json", fix=REBUILD)


def _mismatch(data: Path, found: str, meta: dict[str, Any]) -> BundleError:
    """``data``: the data file, or the folder of a coded index's files."""
    holds = f"the index data files in {data} hold" if data.is_dir() else f"the index data file {data} holds"
    return BundleError(f"{holds} {found}, but index.json records a {meta['kind']} index of {meta['size']} "
                       f"{meta['dim']}-d vectors", where=str(data), fix=REBUILD)


def _load_torch(data: Path, meta: dict[str, Any], paths: list[str | None], info: dict[str, Any]) -> ExactIndex:
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


def _load_exact(data: Path, meta: dict[str, Any], paths: list[str | None], info: dict[str, Any]) -> ExactIndex:
    faiss = _faiss_for(data.parent)
    stored = _read(faiss.read_index, data)
    if (not isinstance(stored, faiss.IndexFlat) or stored.ntotal != meta["size"] or stored.d != meta["dim"]
            or stored.metric_type != faiss.METRIC_INNER_PRODUCT):
        raise _mismatch(data, f"a {type(stored).__name__} of {stored.ntotal} {stored.d}-d vectors", meta)
    return ExactIndex(stored.reconstruct_n(0, stored.ntotal), paths, info, codec=meta["codec"])


def _load_coded(codec: Any, folder: Path, meta: dict[str, Any]) -> Any:
    """The codec's index from its files, checked against ``index.json``'s size and dimension."""
    try:
        index = codec.load(folder, {key: value for key, value in meta.items() if key != "files"})
    except ValueError as exc:  # the codec found another kind of index, or a damaged file
        raise _mismatch(folder, str(exc), meta) from None
    except (RuntimeError, OSError) as exc:  # faiss's C++ errors (truncated, not an index), a missing file
        reader = " by faiss" if isinstance(exc, RuntimeError) else ""
        raise BundleError(f"the index data files in {folder} cannot be read{reader}: {str(exc).splitlines()[-1]}",
                          where=str(folder), fix=REBUILD) from None
    if int(index.ntotal) != meta["size"] or int(index.d) != meta["dim"]:
        raise _mismatch(folder, f"a {type(index).__name__} of {index.ntotal} {index.d}-d vectors", meta)
    return index


def _faiss_for(folder: Path) -> Any:
    faiss = faiss_module()  # only the exact index is read here; a codec reads its own files
    if faiss is None:
        raise BundleError(f"the index in {folder} is a faiss index and faiss is not installed",
                          where=str(folder), fix="pip install faiss-cpu")
    return faiss


def _read(reader: Any, path: Path) -> Any:
    try:
        return reader(str(path))
    except RuntimeError as exc:  # faiss's C++ errors: truncated, not an index
        raise BundleError(f"the index data file {path} cannot be read by faiss: {str(exc).splitlines()[-1]}",
                          where=str(path), fix=REBUILD) from None
