"""The first kNN search of a leave-one-out evaluation, using the symmetry of the distance matrix.

When the queries *are* the gallery, ``dist(i, j) = dist(j, i)``: one ``−2·x_I·x_Jᵀ`` block of a matrix product
serves the rows of block ``I`` and, transposed, those of block ``J``, so only the blocks on and above the
diagonal are multiplied — half of the flops of a brute-force search such as ``faiss.knn(x, x, k)``. Each row
keeps its ``k`` smallest values in faiss's own heaps (``float_maxheap_array_t``, the selection ``faiss.knn``
uses), and the result has ``faiss.knn``'s form: float32 squared distances in ascending order and int64
positions.

The values are not bit-identical to faiss's, and need not be: :mod:`dmlplug.evaluation.knn_rerank` accepts a
backend's order only where it is certified by the float32 error bound of
:func:`~dmlplug.evaluation.knn.exact_knn` and re-ranks near-ties in float64, so the final neighbours are the
canonical ones whichever float32 kernel produced the candidates. The bound covers this computation: a row of
block ``I`` selects by ``v = fl(|x_j|² + fl(−2 x_i·x_j))`` (the ``−2`` is applied to ``x_i`` beforehand, a
power of two, exact), and ``|x_i|²`` — the same for the whole row, so it cannot change which items are
selected — is added to the ``k`` selected values afterwards; the dot product and the float32 norms are off by
at most ``γ_D`` of their absolute terms and the two additions by ``u`` each, within ``(D + 4)·u·(|x_i| + |x_j|)²``.
Rounding is monotone, so an item left out has a distance no smaller than the last one kept, the premise of
the widening step.

The product's flops halve but the selection does not (every value still passes through two heaps). On the
2-core CI machine, quiet, it was nevertheless faster than ``faiss.knn`` (with the plain search's k) at every size
tried: 0.62×–0.87× the wall time with 2 threads at 6k and 60k rows of 32 to 512 dimensions, 0.83×–0.89× the CPU
time with one thread at 60k × 128, so :data:`MIN_DIM` lets every dimension use it (a first measurement on a
loaded machine had suggested 256).

Threads: the blocks are shared among ``threads`` Python threads, each with single-threaded BLAS and its own
heaps (merged at the end), instead of a multi-threaded BLAS followed by faiss's OpenMP loop: alternating two
thread pools that each spin while the other works was several times slower on a 2-core machine.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

#: Dimension from which the symmetric search replaces ``faiss.knn`` in leave-one-out (see the module doc).
MIN_DIM = 1

#: Rows per block: 512 × 512 float32 blocks (1 MiB, and as much for the transposed copy) stay in the cache.
BLOCK_ROWS = 512


def symmetric_knn(x: np.ndarray, k: int, *, threads: int, budget_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` nearest rows of ``x`` to every row of ``x`` (itself included), like ``faiss.knn(x, x, k)``.

    Args:
        x: ``N×D`` C-contiguous float32 array with finite values.
        k: Neighbours per row, at most ``N``.
        threads: Worker threads (each runs single-threaded BLAS and heaps).
        budget_bytes: Working memory for the blocks (each thread holds two ``b×b`` float32 blocks).

    Returns:
        ``N×k`` float32 squared distances (ascending, clamped at 0 like faiss's) and ``N×k`` int64 positions.
    """
    import faiss

    n = x.shape[0]
    threads = max(1, min(int(threads), 64))
    bs = int(min(BLOCK_ROWS, max(16, int((budget_bytes / (8 * threads)) ** 0.5))))
    sq = np.einsum("ij,ij->i", x, x)  # float32 norms: their error is inside the bound (module doc)
    minus2x = x * np.float32(-2.0)
    starts = list(range(0, n, bs))
    tasks: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
    for a, i in enumerate(starts):
        for j in starts[a:]:
            tasks.put((i, j))
    heaps = [_Heaps(faiss, n, k) for _ in range(threads)]
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(h: _Heaps) -> None:
        faiss.omp_set_num_threads(1)  # this thread's OpenMP setting only: faiss's heap loop stays serial
        buf = np.empty(bs * bs, np.float32)
        buf_t = np.empty(bs * bs, np.float32)
        try:
            while True:
                try:
                    i, j = tasks.get_nowait()
                except queue.Empty:
                    return
                ni, nj = min(bs, n - i), min(bs, n - j)
                block = buf[:ni * nj].reshape(ni, nj)
                np.matmul(minus2x[i:i + ni], x[j:j + nj].T, out=block)
                if j != i:  # the rows of block J: the transposed product plus the norms of block I
                    block_t = buf_t[:ni * nj].reshape(nj, ni)
                    np.add(block.T, sq[None, i:i + ni], out=block_t)
                    h.add(block_t, first_row=j, first_id=i)
                np.add(block, sq[None, j:j + nj], out=block)
                h.add(block, first_row=i, first_id=j)
        except BaseException as exc:  # surfaced in the calling thread below
            with lock:
                errors.append(exc)

    with _serial_blas():
        if threads == 1:  # in this thread: its OpenMP setting is put back afterwards
            before = faiss.omp_get_max_threads()
            try:
                work(heaps[0])
            finally:
                faiss.omp_set_num_threads(before)
        else:
            with ThreadPoolExecutor(max_workers=threads) as pool:
                list(pool.map(work, heaps))
    if errors:
        raise errors[0]
    main = heaps[0]
    for other in heaps[1:]:
        main.merge(other)
    main.heaps.reorder()  # ascending order
    dist, idx = main.dist, main.idx
    dist += sq[:, None]
    np.maximum(dist, 0.0, out=dist)
    return dist, idx


def _serial_blas() -> contextlib.AbstractContextManager[object]:
    """Single-threaded BLAS while the blocks are multiplied.

    threadpoolctl comes with scikit-learn; without it BLAS keeps its threads: slower, the same result.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


class _Heaps:
    """One bounded max-heap per row (faiss's ``float_maxheap_array_t``) over numpy storage."""

    def __init__(self, faiss: Any, n: int, k: int):  # faiss: the module, imported lazily
        self.faiss = faiss
        self.dist = np.empty((n, k), dtype=np.float32)
        self.idx = np.empty((n, k), dtype=np.int64)
        heaps = faiss.float_maxheap_array_t()
        heaps.k, heaps.nh = k, n
        heaps.val = faiss.swig_ptr(self.dist)
        heaps.ids = faiss.swig_ptr(self.idx)
        heaps.heapify()
        self.heaps = heaps

    def add(self, values: np.ndarray, *, first_row: int, first_id: int) -> None:
        """Offer ``values[r, c]`` (C-contiguous) with id ``first_id + c`` to the heap of row ``first_row + r``."""
        rows, cols = values.shape
        self.heaps.addn(cols, self.faiss.swig_ptr(values), first_id, first_row, rows)

    def merge(self, other: _Heaps) -> None:
        """Offer every entry of ``other`` (unfilled slots hold +inf and are never kept)."""
        k = self.idx.shape[1]
        self.heaps.addn_with_ids(k, self.faiss.swig_ptr(other.dist), self.faiss.swig_ptr(other.idx), k)
