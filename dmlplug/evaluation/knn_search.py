"""One kNN backend run as it is: faiss on CPU or GPU, or a chunked torch search, in the backend's own order.

:class:`Searcher` returns what the backend computed (float32 squared distances by the ``|q|² + |g|² − 2 q·g``
expansion, and gallery positions); making that order canonical is the job of
:mod:`dmlplug.evaluation.knn_rerank`. The small array helpers here are shared by both: they keep torch data on
its device and view CPU tensors without copying them.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def to_torch(x: Any) -> Any:
    """``x`` as a torch tensor (a numpy array is wrapped without a copy when it is contiguous)."""
    import torch

    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x))


def as_numpy32(x: Any) -> np.ndarray:
    """``x`` as a contiguous float32 numpy array (a CPU tensor is viewed, a GPU tensor copied to the host)."""
    if not isinstance(x, np.ndarray):
        x = x.detach()
        x = x.numpy() if x.device.type == "cpu" else x.cpu().numpy()  # a CPU tensor is viewed, not copied
    return np.ascontiguousarray(x, dtype=np.float32)


def row_norms(x: Any) -> np.ndarray:
    """Float64 upper bounds of the Euclidean norms of the rows of an array or tensor, as numpy.

    A tensor's norms are computed in float64 on its device. A numpy array's squared norms are summed in float32
    (a float64 ``einsum`` over float32 rows is about 30× slower, a sizeable part of an evaluation's cost beside
    the search) and then raised by their worst-case rounding error: a float32 sum of ``D`` non-negative squares
    is below the true sum by at most ``γ_{D+1} ≈ (D+1)·u`` of it (Higham §3.1; ``u`` = 2⁻²⁴), plus at most
    ``2⁻¹⁴⁹`` per square that falls into the subnormal range. These bounds only widen the certified error
    bound of :func:`~dmlplug.evaluation.knn.exact_knn` by about ``D·u``: the canonical result never depends on
    them, only how many near-ties are re-ranked. Rows whose float32 sum overflows are summed in float64 instead.
    """
    if not isinstance(x, np.ndarray):
        return sq_norms(x).sqrt().cpu().numpy()
    dim = x.shape[1]
    with np.errstate(over="ignore"):  # an overflow is handled below
        sq = np.einsum("ij,ij->i", x, x).astype(np.float64)
    bound = sq * (1.0 + 1.1 * (dim + 2) * 2.0**-24) + dim * 2.0**-149
    overflow = ~np.isfinite(sq)
    if overflow.any():  # the same bound in float64 (u = 2⁻⁵³, doubled to cover the rounding of the sqrt)
        sq64 = np.einsum("ij,ij->i", x[overflow], x[overflow], dtype=np.float64)
        bound[overflow] = sq64 * (1.0 + (dim + 4) * 2.0**-52)
    return np.sqrt(bound)


def on_cpu(x: Any) -> bool:
    """Whether ``x`` is a numpy array or a CPU tensor."""
    return isinstance(x, np.ndarray) or x.device.type == "cpu"


def sq_norms(x: Any) -> Any:
    """Float64 squared row norms of a tensor, on its device, without a float64 copy of the rows."""
    import torch

    return torch.linalg.vector_norm(x, dim=1, dtype=torch.float64).square()


class Searcher:
    """Runs one backend on raw float32 data and returns backend-ordered (sq. distances, positions).

    Args:
        backend: A resolved backend name (``faiss-cpu``, ``faiss-gpu``, ``torch``).
        gallery: ``G×D`` float32 array or tensor searched by every :meth:`search`.
    """

    def __init__(self, backend: str, gallery: Any):
        self.backend = backend
        self.gallery = gallery
        # faiss's GPU resources (streams, scratch memory), made once per search for faiss-gpu only.
        self._gpu_res: Any = None
        if backend == "torch":
            g = to_torch(gallery)
            self.gallery_t = g
            self.gallery_sq = sq_norms(g).to(g.dtype)
        elif backend == "faiss-gpu":
            import faiss

            self._gpu_res = faiss.StandardGpuResources()

    def search(self, queries: Any, k: int, chunk_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Backend k-NN of ``queries`` (sorted by backend distance) as numpy (float32, int64)."""
        if self.backend == "faiss-cpu":
            import faiss

            q = as_numpy32(queries)
            d, i = faiss.knn(q, as_numpy32(self.gallery), k)
            return d, i.astype(np.int64, copy=False)
        if self.backend == "faiss-gpu":
            import faiss

            if isinstance(self.gallery, np.ndarray):
                d, i = faiss.knn_gpu(self._gpu_res, as_numpy32(queries), self.gallery, k)
                return d, i.astype(np.int64, copy=False)
            # Tensors on the GPU go to faiss as they are (its torch bridge), only the Q×k result comes back.
            import faiss.contrib.torch_utils  # noqa: F401  (lets knn_gpu take torch tensors)

            d_t, i_t = faiss.knn_gpu(self._gpu_res, to_torch(queries).float().contiguous(), self.gallery, k)
            return d_t.cpu().numpy(), i_t.cpu().numpy().astype(np.int64, copy=False)
        return self._torch_search(queries, k, chunk_rows)

    def _torch_search(self, queries: Any, k: int, chunk_rows: int) -> tuple[np.ndarray, np.ndarray]:
        import torch

        g, g_sq = self.gallery_t, self.gallery_sq
        q_all = to_torch(queries).to(g.device)
        out_d, out_i = [], []
        # Full float32 matmuls: TF32 would void the error bound the exactness check relies on.
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            with torch.no_grad():
                for start in range(0, len(q_all), chunk_rows):
                    q = q_all[start:start + chunk_rows]
                    q_sq = sq_norms(q).to(q.dtype)
                    dist = torch.addmm(g_sq.unsqueeze(0), q, g.T, beta=1.0, alpha=-2.0)
                    dist.add_(q_sq.unsqueeze(1)).clamp_(min=0)
                    d, i = torch.topk(dist, k, dim=1, largest=False, sorted=True)
                    out_d.append(d.cpu().numpy())
                    out_i.append(i.cpu().numpy())
                    del dist
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous
        return np.concatenate(out_d), np.concatenate(out_i).astype(np.int64, copy=False)
