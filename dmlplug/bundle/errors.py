"""The user errors of exporting and using bundles."""

from __future__ import annotations

from dmlplug.errors import DmlplugError

#: How to get the optional ONNX packages (the ``export`` extra of pyproject.toml).
ONNX_INSTALL = 'pip install "dmlplug[export]" (or: pip install onnx onnxruntime), or export with --format torchscript'


class BundleError(DmlplugError):
    """A bundle cannot be written, read or used (missing file, other format, failed verification)."""


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
