"""The user errors of exporting and using bundles, and the checks of their optional packages.

Public API: codec plugins raise :class:`BundleError` and get faiss through :func:`require_faiss`.
"""

from __future__ import annotations

from typing import Any

from dmlplug.errors import DmlplugError

#: How to get the optional ONNX packages (the ``export`` extra of pyproject.toml).
ONNX_INSTALL = 'pip install "dmlplug[export]" (or: pip install onnx onnxruntime), or export with --format torchscript'


class BundleError(DmlplugError):
    """A bundle cannot be written, read or used (missing file, other format, failed verification)."""


def faiss_module() -> Any:
    """The ``faiss`` module, or ``None`` when it is not installed."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def require_faiss(what: str) -> Any:
    """The ``faiss`` module; ``what`` (``"a pq index"``) needs it.

    Raises:
        BundleError: faiss is not installed; the fix names the exact index, which works without it.
    """
    faiss = faiss_module()
    if faiss is None:
        raise BundleError(f"{what} needs faiss, which is not installed",
                          fix="pip install faiss-cpu, or build an exact index (--codec float32)")
    return faiss


def require_onnx() -> None:
    """Check that ``onnx`` and ``onnxruntime`` can be imported.

    Raises:
        BundleError: One of them is missing; the message says what to install.
    """
    missing = []
    for name in ("onnx", "onnxruntime"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise BundleError(f"the ONNX format needs the package(s) {', '.join(missing)}, which are not installed",
                          fix=ONNX_INSTALL)
