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

Threads: the blocks are shared among ``threads`` Python threads, each with single-threaded BLAS, instead of a
multi-threaded BLAS followed by faiss's OpenMP loop: alternating two thread pools that each spin while the other
works was several times slower on a 2-core machine. All threads offer their values to one set of heaps, a lock
per block of rows keeping two threads off the same rows at once (per-thread heaps would cost ``threads`` times the
memory and a merge after the search, on one core). The threads also share the norms before the blocks and the
sort of each row after them, so that no step of the search runs on one core only.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
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
    threads = max(1, min(int(threads), 64, n))
    bs = int(min(BLOCK_ROWS, max(16, int((budget_bytes / (8 * threads)) ** 0.5))))
    sq = np.empty(n, np.float32)  # float32 norms: their error is inside the bound (module doc)
    minus2x = np.empty_like(x)
    tasks: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
    for task in _task_order(n, bs):
        tasks.put(task)
    heaps = _Heaps(faiss, n, k)
    # One lock per block of rows: a task offers its block to the rows of I, and transposed to those of J.
    locks = [threading.Lock() for _ in range(0, n, bs)]
    # Each thread also prepares and finally sorts its share of the rows (between two barriers: all blocks done).
    shares = np.linspace(0, n, threads + 1).astype(int)
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def multiply() -> None:
        buf = np.empty(bs * bs, np.float32)
        buf_t = np.empty(bs * bs, np.float32)
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
                with locks[j // bs]:
                    heaps.add(block_t, first_row=j, first_id=i)
            np.add(block, sq[None, j:j + nj], out=block)
            with locks[i // bs]:
                heaps.add(block, first_row=i, first_id=j)

    def work(share: int) -> None:
        faiss.omp_set_num_threads(1)  # this thread's OpenMP setting only: faiss's heap loop stays serial
        rows = slice(shares[share], shares[share + 1])
        try:
            np.einsum("ij,ij->i", x[rows], x[rows], out=sq[rows])
            np.multiply(x[rows], np.float32(-2.0), out=minus2x[rows])  # a power of two: exact
            barrier.wait()
            multiply()
            barrier.wait()
            # Ascending order: numpy's sort of these short rows is ~10× faster than faiss's HeapArray.reorder
            # (which pops every heap). Equal values may come in either order, as from faiss.knn.
            order = np.argsort(heaps.dist[rows], axis=1)
            heaps.dist[rows] = np.take_along_axis(heaps.dist[rows], order, 1) + sq[rows, None]
            heaps.idx[rows] = np.take_along_axis(heaps.idx[rows], order, 1)
        except BaseException as exc:  # surfaced in the calling thread below (list.append is atomic)
            errors.append(exc)
            barrier.abort()  # the other threads stop waiting for this one

    with _serial_blas():
        if threads == 1:  # in this thread: its OpenMP setting is put back afterwards
            before = faiss.omp_get_max_threads()
            try:
                work(0)
            finally:
                faiss.omp_set_num_threads(before)
        else:
            pool = [threading.Thread(target=work, args=(share,)) for share in range(threads)]
            for thread in pool:
                thread.start()
            for thread in pool:
                thread.join()
    if errors:
        raise errors[0]
    np.maximum(heaps.dist, 0.0, out=heaps.dist)
    return heaps.dist, heaps.idx


def _task_order(n: int, bs: int) -> list[tuple[int, int]]:
    """The blocks ``(I, J)``, ``I ≤ J``, by first rows, the costliest first so the threads finish together.

    Blocks off the diagonal cost twice a diagonal one (two heap updates and a transposition) and the last block
    row may be partial. Within a cost, one diagonal ``J − I`` after another, so the blocks handled at the same
    time by different threads rarely share a block of rows (and its lock).
    """
    starts = range(0, n, bs)
    pairs = [(i, i + d * bs) for d in range(len(starts)) for i in starts if i + d * bs < n]
    return sorted(pairs, key=lambda p: -min(bs, n - p[0]) * min(bs, n - p[1]) * (1 if p[0] == p[1] else 2))


def _serial_blas() -> contextlib.AbstractContextManager[object]:
    """Single-threaded BLAS while the blocks are multiplied.

    threadpoolctl comes with scikit-learn; without it BLAS keeps its threads: slower, the same result.
    """
    controller = _blas_controller()
    return contextlib.nullcontext() if controller is None else controller.limit(limits=1, user_api="blas")


@functools.cache
def _blas_controller() -> Any:
    """The controller (threadpoolctl) of the loaded BLAS libraries, or None without threadpoolctl.

    Made once: finding the libraries walks every shared object of the process (≈ 1 ms a call). A BLAS loaded
    later is not seen, which only makes it keep its threads (slower, the same result).
    """
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController()


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

