"""Which kNN backend a search uses: the accepted names, whether faiss is installed, and the ``auto`` choice.

The backends themselves run in :mod:`dmlplug.evaluation.knn_search`; :func:`resolve_backend` is re-exported
by :mod:`dmlplug.evaluation.knn`, where callers import it.
"""

from __future__ import annotations

from dmlplug.errors import RunError, did_you_mean
from dmlplug.knn_backends import KNN_BACKENDS

#: Backend names accepted by :class:`~dmlplug.evaluation.EvalContext`: the one list the recipe schema checks
#: ``[evaluation] backend`` against too (:data:`dmlplug.knn_backends.KNN_BACKENDS`).
BACKENDS = KNN_BACKENDS


def faiss_available() -> bool:
    """Whether faiss can be imported."""
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def faiss_gpu_available() -> bool:
    """Whether faiss was built with GPU support and sees a GPU."""
    try:
        import faiss
    except ImportError:
        return False
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def resolve_backend(requested: str, on_cuda: bool) -> str:
    """Pick the kNN backend.

    ``auto`` prefers faiss-gpu when the data is on a GPU and faiss-gpu sees one, then torch for data on a
    GPU, then faiss-cpu, then torch.

    Raises:
        RunError: The backend name is unknown or the backend is not installed.
    """
    if requested not in BACKENDS:
        raise RunError(
            f"unknown kNN backend {requested!r}{did_you_mean(str(requested), BACKENDS)}",
            where="evaluation backend",
            fix="use one of: " + ", ".join(BACKENDS),
        )
    if requested == "auto":
        if on_cuda:
            return "faiss-gpu" if faiss_gpu_available() else "torch"
        return "faiss-cpu" if faiss_available() else "torch"
    if requested == "faiss-cpu" and not faiss_available():
        raise RunError("the faiss-cpu kNN backend needs faiss", where="evaluation backend",
                       fix="pip install faiss-cpu, or use backend='torch'")
    if requested == "faiss-gpu" and not faiss_gpu_available():
        raise RunError("the faiss-gpu kNN backend needs faiss with GPU support and a visible GPU",
                       where="evaluation backend",
                       fix="pip install faiss-gpu-cu12 (dmlplug[gpu]), or use backend='torch'")
    return requested
