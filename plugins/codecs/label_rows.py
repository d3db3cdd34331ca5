"""Fixed-width rows by label, in memory or in a file read through a memory map: what rescores binary codes.

Row ``i`` holds label ``i``'s row (labels are gallery rows, new items get the next ones), so no label-to-row map
is kept; rows never written, and those of removed items, are zero. On disk the rows are a file read through
``np.memmap``: a temporary file this object writes while an index is built or edited, or the ``.npy`` file of a
saved index, copied to a temporary file on the first write so that a saved index never changes in place.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import weakref
from pathlib import Path

import numpy as np

#: Rows copied at a time between files.
BLOCK_ROWS = 65_536


class LabelRows:
    """Rows of ``width`` values of ``dtype`` by label.

    Args:
        width: Values a row.
        dtype: Their type.
        on_disk: Keep them in a file read through a memory map (else in memory).
        rows: Rows to start from (a saved ``.npy``, memory-mapped when ``on_disk``).
    """

    def __init__(self, width: int, dtype: np.dtype | type, *, on_disk: bool, rows: np.ndarray | None = None):
        self.width, self.dtype, self.on_disk = width, np.dtype(dtype), on_disk
        self.array: np.ndarray = rows if rows is not None else np.zeros((0, width), self.dtype)
        self._file: Path | None = None  # the temporary file this object owns (on disk)
        self._capacity: np.ndarray | None = None  # in memory: the rows and zero rows to grow into

    @property
    def nbytes(self) -> int:
        """Bytes of all rows."""
        return len(self.array) * self.width * self.dtype.itemsize

    def read(self, labels: np.ndarray) -> np.ndarray:
        """The rows of ``labels``."""
        return np.asarray(self.array[labels])

    def write(self, labels: np.ndarray, values: np.ndarray) -> None:
        """Set the rows of ``labels`` to ``values`` (the table grows to the largest label)."""
        labels = np.asarray(labels, dtype=np.int64)
        if not len(labels):
            return
        values = np.ascontiguousarray(values, dtype=self.dtype)
        rows = max(len(self.array), int(labels.max()) + 1)
        if not self.on_disk:
            if self._capacity is None or rows > len(self._capacity):  # doubled: a gallery added chunk by chunk
                grown = np.zeros((max(rows, 2 * len(self.array)), self.width), self.dtype)  # is copied a few times
                grown[:len(self.array)] = self.array
                self._capacity = grown
            self.array = self._capacity[:rows]
            self.array[labels] = values
            return
        order = np.argsort(labels, kind="stable")
        labels, values = labels[order], values[order]
        runs = np.flatnonzero(np.diff(labels) != 1) + 1  # consecutive labels: one write each
        row_bytes = self.width * self.dtype.itemsize
        with open(self._own_file(), "r+b") as file:
            for run_labels, run_values in zip(np.split(labels, runs), np.split(values, runs), strict=True):
                file.seek(int(run_labels[0]) * row_bytes)
                file.write(run_values.tobytes())
            file.truncate(rows * row_bytes)  # never shorter: rows covers every label written and every row before
        self.array = np.memmap(self._own_file(), dtype=self.dtype, mode="r", shape=(rows, self.width))

    def save(self, path: Path) -> None:
        """Write every row as the ``.npy`` file ``path``, a block at a time."""
        out = np.lib.format.open_memmap(path, mode="w+", dtype=self.dtype, shape=(len(self.array), self.width))
        for start in range(0, len(self.array), BLOCK_ROWS):
            out[start:start + BLOCK_ROWS] = self.array[start:start + BLOCK_ROWS]
        out.flush()
        del out

    @classmethod
    def load(cls, path: Path, width: int, dtype: np.dtype | type, *, on_disk: bool) -> LabelRows:
        """The rows :meth:`save` wrote to ``path`` (memory-mapped when ``on_disk``).

        Raises:
            ValueError: The file is damaged, or holds rows of another width or type.
        """
        try:
            rows = np.load(path, mmap_mode="r" if on_disk else None)
        except ValueError as exc:  # truncated, not an .npy
            raise ValueError(f"a damaged {path.name} ({exc})") from None
        if rows.ndim != 2 or rows.shape[1] != width or rows.dtype != np.dtype(dtype):
            raise ValueError(f"{path.name} of {rows.dtype} rows {rows.shape}, not {np.dtype(dtype)} rows of {width}")
        return cls(width, dtype, on_disk=on_disk, rows=rows)

    def _own_file(self) -> Path:
        """The temporary file of the rows, made on the first write (with the rows so far) and deleted with them."""
        if self._file is None:
            handle, name = tempfile.mkstemp(prefix="dmlplug-rows-", suffix=".bin")
            with os.fdopen(handle, "wb") as file:
                for start in range(0, len(self.array), BLOCK_ROWS):
                    file.write(np.ascontiguousarray(self.array[start:start + BLOCK_ROWS]).tobytes())
            self._file = Path(name)
            weakref.finalize(self, _unlink, name)
        return self._file


def _unlink(name: str) -> None:
    with contextlib.suppress(OSError):  # already gone (a temporary folder cleaned up first)
        os.unlink(name)
