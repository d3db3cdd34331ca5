"""Device and precision selection."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dmlplug.errors import RunError

if TYPE_CHECKING:
    import torch


def resolve_device(requested: str) -> str:
    """Map ``auto`` / ``cpu`` / ``cuda`` to an available device.

    Raises:
        RunError: CUDA was requested but no GPU is usable.
    """
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise RunError(
            "device 'cuda' was requested but no CUDA GPU is available",
            where="run.device",
            fix='use device = "auto" or "cpu" (or --device cpu)',
        )
    return requested


def autocast_dtype(precision: str, device: str) -> torch.dtype | None:
    """The autocast dtype for ``precision`` on ``device``, or None for full precision.

    Autocast is only used on CUDA; CPU runs stay in fp32 so that results are comparable and exact.
    """
    import torch

    if not device.startswith("cuda") or precision == "fp32":
        return None
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def is_out_of_memory(exc: BaseException) -> bool:
    """True for CUDA/CPU out-of-memory errors (torch's OutOfMemoryError, MemoryError, faiss/cuBLAS messages)."""
    import torch

    if isinstance(exc, MemoryError | torch.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "cudaerrormemoryallocation" in text)
