"""The ``example_sq4`` index codec (imported only by its factory): faiss's 4-bit scalar quantiser."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import faiss
import numpy as np

#: The file the index is written to.
INDEX_FILE = "index.faiss"
#: Vectors the per-coordinate ranges are trained on, at most.
TRAINING_SAMPLE = 65_536


class ScalarQuantizer4:
    """Each coordinate quantised to 4 bits over its trained range: ``ceil(d/2)`` bytes a vector and its 8-byte id.

    The index is faiss's ``IDMap,SQ4`` (labels are gallery rows, so items can be removed), searched by inner
    product over the decoded vectors (a dmlplug :class:`~dmlplug.protocols.IndexCodec`).
    """

    exact = False
    removable = True
    keeps_floats = False

    def plan(self, n: int, dim: int, k: int) -> dict[str, Any]:
        """No parameters: the ranges are learned from the gallery."""
        return {}

    def budget_plans(self, n: int, dim: int, k: int) -> list[dict[str, Any]]:
        """One plan: ``--budget`` may choose it."""
        return [{}]

    def bytes_floor(self, dim: int, plan: dict[str, Any]) -> float:
        """Half a byte a coordinate (rounded up to whole bytes) and the id."""
        return float((dim + 1) // 2 + 8)

    def training_rows(self, n: int, plan: dict[str, Any]) -> int:
        """The ranges are trained on a sample."""
        return min(n, TRAINING_SAMPLE)

    def new_index(self, dim: int, plan: dict[str, Any]) -> Any:
        """An empty ``IDMap,SQ4`` index."""
        return faiss.index_factory(dim, "IDMap,SQ4", faiss.METRIC_INNER_PRODUCT)

    def reconstruct(self, index: Any, labels: Any) -> np.ndarray:
        """Never asked: the codes are lossy, so the index does not claim to keep the vectors."""
        raise ValueError("example_sq4 keeps 4-bit codes, not the float32 vectors")

    def sizes(self, index: Any) -> tuple[int, int]:
        """The serialized index, in memory and on disk."""
        size = len(faiss.serialize_index(index))
        return size, size

    def save(self, index: Any, folder: Path) -> list[str]:
        """``index.faiss``."""
        faiss.write_index(index, str(folder / INDEX_FILE))
        return [INDEX_FILE]

    def load(self, folder: Path, plan: dict[str, Any]) -> Any:
        """``index.faiss``, checked to hold a labelled 4-bit scalar quantiser."""
        index = faiss.read_index(str(folder / INDEX_FILE))
        inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap) else index
        if not isinstance(inner, faiss.IndexScalarQuantizer) or inner.sq.qtype != faiss.ScalarQuantizer.QT_4bit:
            raise ValueError(f"a {type(inner).__name__} of {index.ntotal} {index.d}-d vectors")
        return index
