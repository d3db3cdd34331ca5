"""What the service serves: one verified bundle and one index folder, shared by every request of a worker.

The bundle and the index are loaded and checked exactly as ``dmlplug search`` does (:mod:`dmlplug.bundle.api`).
The index folder on disk is the truth: writes (``POST /v1/items``, ``DELETE /v1/items/{id}``) go through the
same edit as ``dmlplug index-add`` / ``index-remove``, which swaps a complete new folder in, one writer at a time
(a lock file beside the folder serialises the workers of a server and any other process that uses it). Readers
keep answering from the index they hold while a write runs; every request first looks whether the folder was
replaced (one ``stat``) and, if so, reads the new one, so all workers serve what was last written.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import dmlplug.bundle.api as api
from dmlplug.errors import DmlplugError

from .settings import ServeSettings


class ClientError(DmlplugError):
    """A request the service refuses (answered with ``status`` and the message as JSON)."""

    def __init__(self, what: str, *, status: int = 400, where: str | None = None, fix: str | None = None):
        super().__init__(what, where=where, fix=fix)
        self.status = status


@dataclass(frozen=True)
class Snapshot:
    """One index as read from its folder, with the folder's identity when it was read."""

    index: Any
    stamp: tuple[int, int]


class SearchService:
    """The loaded bundle and index of one worker, and the operations of the API on them.

    Args:
        settings: The server's settings.
        registry: Where codecs and re-rankers are looked up (the command's plugin host's).

    Raises:
        DmlplugError: The bundle or the index fails its checks, or the index was built by another model.
    """

    def __init__(self, settings: ServeSettings, registry: Any):
        self.settings = settings
        self.registry = registry
        self.index_dir = Path(settings.index).resolve()
        self._index_file = str(self.index_dir / api.INDEX_FILE)
        self.bundle = api.load_bundle(settings.bundle, device=settings.device, threads=settings.model_threads())
        self.default_rerank = None if settings.rerank is None else self.parse_rerank(settings.rerank, "--rerank")
        self._lock = threading.RLock()  # a write re-reads the index under it
        self._snapshot = self._read()
        if self.default_rerank is not None:
            api.check_rerankable(self._snapshot.index, self.default_rerank)

    # -- the index ------------------------------------------------------------------------------------------

    def _stamp(self) -> tuple[int, int]:
        """The index folder's identity: a swapped-in folder is a new inode (and a new ``index.json``)."""
        meta = os.stat(self._index_file)  # every request: a str path, no Path object built
        return meta.st_ino, meta.st_mtime_ns

    def _read(self) -> Snapshot:
        with api.folder_lock(self.index_dir, shared=True):
            stamp = self._stamp()
            index = api.read_index(self.index_dir, self.registry)
        api.check_searchable(self.bundle, index)
        return Snapshot(index, stamp)

    def index(self) -> Any:
        """The current index, read again when another writer replaced its folder since."""
        snapshot = self._snapshot
        try:
            current = self._stamp()
        except FileNotFoundError:  # mid-swap on a system without the atomic exchange: the index held is valid
            return snapshot.index
        if current != snapshot.stamp:
            with self._lock:
                if self._snapshot.stamp == snapshot.stamp:
                    self._snapshot = self._read()
            snapshot = self._snapshot
        return snapshot.index

    # -- requests -------------------------------------------------------------------------------------------

    @property
    def embedding_size(self) -> int:
        """``D``."""
        return self.bundle.embedding_size

    def parse_rerank(self, text: str | None, where: str = "rerank") -> Any:
        """A re-ranker spec (``None`` for none), refused with a client error when unknown or invalid."""
        if text is None or text == "":
            return None
        try:
            return api.parse_rerank(text, where=where, registry=self.registry)
        except DmlplugError as exc:
            raise ClientError(exc.what, where=where, fix=exc.fix) from None

    def check_k(self, k: int, index: Any) -> None:
        """Refuse ``k`` below 1 or over the gallery size."""
        if k < 1 or k > index.size:
            raise ClientError(f"k = {k} is not between 1 and the gallery size {index.size}", where="k",
                              fix=f"ask for 1 to {index.size} matches")

    def check_vectors(self, vectors: Any) -> np.ndarray:
        """``vectors`` as a ``Q×D`` float32 array of finite values, or a client error saying what is wrong."""
        try:
            array = np.asarray(vectors, dtype=np.float64)
        except (TypeError, ValueError):
            raise ClientError("vectors must be a list of lists of numbers of equal length", where="vectors") from None
        if array.ndim != 2 or array.shape[0] == 0:
            raise ClientError(f"vectors must be a non-empty list of {self.embedding_size}-number lists, got shape "
                              f"{list(array.shape)}", where="vectors")
        if array.shape[1] != self.embedding_size:
            raise ClientError(f"vectors have {array.shape[1]} numbers, the bundle's embeddings "
                              f"{self.embedding_size}", where="vectors",
                              fix="send embeddings made by this bundle (POST /v1/embed)")
        if not np.isfinite(array).all():
            raise ClientError("vectors hold NaN or infinite values", where="vectors")
        norms = np.linalg.norm(array, axis=1)
        if (norms == 0).any():
            raise ClientError("a vector is all zeros; it has no direction to compare", where="vectors")
        return (array / norms[:, None]).astype(np.float32)

    def search(self, vectors: np.ndarray, names: Sequence[str], *, k: int, threshold: float | None,
               rerank: Any, index: Any) -> tuple[list[dict[str, Any]], dict[str, float]]:
        """The results (the shape ``dmlplug search --json`` prints) and the seconds of the search stage."""
        started = time.perf_counter()
        if rerank is not None:
            try:
                api.check_rerankable(index, rerank)
            except DmlplugError as exc:
                raise ClientError(exc.what, where="rerank", fix=exc.fix) from None
        limit = threshold if threshold is not None else self.bundle.threshold
        results = api.search_vectors(index, vectors, names, k=k, threshold=limit, rerank=rerank)
        return results, {"rerank" if rerank is not None else "search": time.perf_counter() - started}

    def readiness(self) -> dict[str, Any]:
        """What ``/readyz`` reports; raises :class:`ClientError` (503) when the index no longer matches the model."""
        index = self.index()
        gap = api.probe_gap(index, self.bundle)
        if gap is not None and gap > api.PROBE_TOLERANCE:
            raise ClientError(f"the model embeds the index's probe input {gap:.3g} away from what the index records",
                              status=503, fix="restart the server with the bundle that built the index")
        return {"status": "ready", "items": int(index.size), "codec": index.codec, "dim": int(index.dim),
                "probe_gap": gap, "threshold": self.bundle.threshold}

    # -- writes ---------------------------------------------------------------------------------------------

    def gallery_root(self, index: Any) -> Path:
        """Where the index's images live (uploads are stored under it)."""
        root = api.gallery_root(index)
        if root is None:
            raise ClientError("this index records no gallery folder, so uploaded images have nowhere to go",
                              status=409, fix="build the index again with this dmlplug (dmlplug index)")
        return Path(root)

    def add(self, images: Sequence[tuple[str, bytes]], vectors: np.ndarray) -> list[dict[str, Any]]:
        """Store uploaded images under the gallery's ``uploads/`` folder and add them to the index.

        Args:
            images: ``(client's name, the bytes)`` per upload (decoded and embedded already).
            vectors: Their embeddings.

        Returns:
            ``[{"id", "path", "name"}]`` per image added.
        """
        with self._lock:
            root = self.gallery_root(self.index())
            folder = root / "uploads"
            folder.mkdir(parents=True, exist_ok=True)
            paths: list[Path] = []
            for name, data in images:
                suffix = Path(name).suffix.lower() if Path(name).suffix.lower() in api.IMAGE_EXTENSIONS else ".png"
                path = folder / (hashlib.sha256(data).hexdigest()[:32] + suffix)
                if not path.exists():
                    _write_file(path, data)
                paths.append(path)
            edited, ids = api.add_files(self.index_dir, self.registry, vectors, paths)
            self._snapshot = self._read()  # under the folder's lock: the version on disk, whoever wrote last
        return [{"id": item, "path": str(api.item_file(edited, item)), "name": name}
                for item, (name, _) in zip(ids, images, strict=True)]

    def remove(self, item_id: int) -> dict[str, Any]:
        """Remove item ``item_id`` from the index (its image file stays)."""
        with self._lock:
            if api.item_file(self.index(), item_id) is None:
                raise ClientError(f"no item {item_id} in the index", status=404, where="id")
            try:
                edited, _ = api.remove_items(self.index_dir, self.registry, [item_id])
            except DmlplugError as exc:  # e.g. an HNSW index, which cannot remove
                raise ClientError(exc.what, status=409, fix=exc.fix) from None
            self._snapshot = self._read()
        return {"removed": item_id, "items": int(edited.size)}

    def image_file(self, item_id: int) -> Path:
        """The image file of item ``item_id``, only when it lies inside the gallery folder."""
        index = self.index()
        path = api.item_file(index, item_id)
        if path is None:
            raise ClientError(f"no item {item_id} in the index", status=404, where="id")
        root = api.gallery_root(index)
        resolved = path.resolve()
        # Only files under the gallery root: an item added from elsewhere by `dmlplug index-add` is not served.
        if root is None or not resolved.is_relative_to(Path(root).resolve()) or not resolved.is_file():
            raise ClientError(f"item {item_id}'s image is not available", status=404, where="id")
        return resolved


def _write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed into place (never a half-written image)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
