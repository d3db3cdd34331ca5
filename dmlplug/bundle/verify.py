"""An export checks itself: the exported model must embed test images as the PyTorch model does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dmlplug.bundle.errors import BundleError

#: Default bound on max |Δ embedding| between PyTorch and the exported model. Both compute in float32 on
#: unit-length vectors; kernel differences (ONNX Runtime's fused convolutions) stay around 1e-6, so 1e-4
#: still catches a wrong graph or preprocessing (those differ by 1e-1) with a wide margin.
DEFAULT_TOLERANCE = 1e-4
#: Default number of test images compared.
DEFAULT_IMAGES = 256


def pick_images(labels: np.ndarray, count: int, seed: int = 0) -> np.ndarray:
    """Up to ``count`` indices, whole classes in a seeded random order, so recall@1 has queries with matches.

    A plain random sample of a large test split would hold mostly one image per class, leaving recall@1
    without queries; taking classes whole keeps every sampled query's class mates.
    """
    rng = np.random.default_rng(seed)
    picked: list[int] = []
    for label in rng.permutation(np.unique(labels)):
        if len(picked) >= count:
            break
        picked.extend(np.flatnonzero(labels == label).tolist())
    return np.sort(np.asarray(picked[:count], dtype=np.int64))


def recall_at_1(embeddings: np.ndarray, labels: np.ndarray) -> float | None:
    """Leave-one-out recall@1 with the evaluation's own code; ``None`` when no query has a class mate."""
    from dmlplug.errors import DataError
    from dmlplug.evaluation.api import evaluate

    try:
        return float(evaluate(embeddings, labels, [{"name": "recall", "k": [1]}])["recall@1"])
    except DataError:
        return None


def verify_export(reference: Callable[[Any], np.ndarray], exported: Callable[[Any], np.ndarray], images: Any,
                  labels: np.ndarray, tolerance: float, *, label: str, batch_size: int = 64) -> dict[str, Any]:
    """Compare the exported model with PyTorch on a batch of preprocessed test images.

    Args:
        reference: The PyTorch runner.
        exported: The runner of the exported file.
        images: ``N×3×H×W`` preprocessed tensor.
        labels: ``N`` labels.
        tolerance: Largest max |Δ embedding| accepted.
        label: The format, for the message (``"onnx"``).
        batch_size: Images per forward pass.

    Returns:
        ``{"images", "max_abs_diff", "tolerance", "recall@1_pytorch", "recall@1_exported"}``.

    Raises:
        BundleError: The difference exceeds ``tolerance`` (or is not finite).
    """
    ref = np.concatenate([reference(images[i:i + batch_size]) for i in range(0, len(images), batch_size)])
    out = np.concatenate([exported(images[i:i + batch_size]) for i in range(0, len(images), batch_size)])
    diff = float(np.abs(ref - out).max()) if ref.shape == out.shape else float("inf")
    result = {"images": len(images), "max_abs_diff": diff, "tolerance": float(tolerance),
              "recall@1_pytorch": recall_at_1(ref, labels), "recall@1_exported": recall_at_1(out, labels)}
    if not diff <= tolerance:
        raise BundleError(
            f"the exported {label} model does not embed like the PyTorch model: max |Δ embedding| = {diff:.3g} "
            f"on {len(images)} test images exceeds the tolerance {tolerance:g} (recall@1 "
            f"{result['recall@1_pytorch']} in PyTorch, {result['recall@1_exported']} exported); nothing was written",
            fix="export with the other --format; raise --tolerance only if the difference is rounding "
            "(e.g. on a GPU)")
    return result
