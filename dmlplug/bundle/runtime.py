"""The embedding network of a run and the runners that execute it: PyTorch, ONNX Runtime, TorchScript.

Every runner maps a ``B×3×H×W`` float32 tensor (already preprocessed) to a ``B×D`` float32 numpy array of
L2-normalised embeddings, so a bundle's model and its run's model are interchangeable and comparable.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from dmlplug.bundle.errors import BundleError

#: Names of the exported graph's input and output (also written to bundle.json).
INPUT_NAME, OUTPUT_NAME = "images", "embedding"


class EmbeddingNet(nn.Module):
    """Backbone, head and L2 normalisation: the embedding evaluation ranks by, as one tensor -> tensor module.

    The head's evaluation embedding (``ModelOutput.embedding``: a multi-head model's weighted concatenation
    included) is normalised again, which leaves an already normalised head unchanged (up to rounding) and
    makes cosine similarity an inner product for any head.

    Args:
        model: The run's :class:`~dmlplug.engine.model.EmbeddingModel`.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``B×D`` unit-length embeddings of a preprocessed batch."""
        return nn.functional.normalize(self.model(images).embedding.float(), dim=1)


class TorchRunner:
    """Runs an :class:`EmbeddingNet` (or a loaded TorchScript module) with PyTorch."""

    def __init__(self, module: nn.Module, device: str = "cpu"):
        self.module = module.to(device).eval()
        self.device = device

    @torch.no_grad()
    def __call__(self, batch: torch.Tensor | np.ndarray) -> np.ndarray:
        """Embed one preprocessed batch (a tensor, or the float32 array of :func:`preprocess_batch`)."""
        if isinstance(batch, np.ndarray):
            batch = torch.from_numpy(batch)
        return self.module(batch.to(self.device)).float().cpu().numpy()


class OnnxRunner:
    """Runs ``model.onnx`` with ONNX Runtime (CUDA provider when ``device`` is a GPU and it is available)."""

    def __init__(self, path: str | Path, device: str = "cpu", threads: int | None = None):
        import onnxruntime as ort

        providers = ["CPUExecutionProvider"]
        if device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        options = ort.SessionOptions()
        if threads is not None:  # e.g. a server's workers sharing the cores; by default every core
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            # Idle threads sleep instead of spinning for the next call: between a server's model calls they would
            # otherwise take the cores from the threads that parse requests and decode images.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(path), options, providers=providers)

    def __call__(self, batch: torch.Tensor | np.ndarray) -> np.ndarray:
        """Embed one preprocessed batch (a tensor, or the float32 array of :func:`preprocess_batch`)."""
        if isinstance(batch, torch.Tensor):
            batch = batch.detach().cpu().numpy()
        array = np.ascontiguousarray(batch, dtype=np.float32)
        return self.session.run([OUTPUT_NAME], {INPUT_NAME: array})[0]


def load_model(path: Path, format: str, device: str, *, input_size: Sequence[int],
               embedding_size: int, threads: int | None = None) -> OnnxRunner | TorchRunner:
    """A runner for a bundle's model file, checked against the sizes ``bundle.json`` records.

    Args:
        path: ``model.onnx`` or ``model.pt`` (its sha256 already checked).
        format: ``"onnx"`` or ``"torchscript"``.
        device: Where it runs.
        input_size: ``[3, H, W]`` from bundle.json.
        embedding_size: ``D`` from bundle.json.
        threads: ONNX Runtime's intra-op threads (``None``: its default); TorchScript runs on torch's threads.

    Raises:
        BundleError: The runtime cannot load the file, or the ONNX graph's input or output shape is not the
            recorded one (a TorchScript module declares no shapes; its output is checked when it runs).
    """
    runtime = "ONNX Runtime" if format == "onnx" else "torch.jit"
    try:
        runner = OnnxRunner(path, device, threads) if format == "onnx" else load_torchscript(path, device)
    except Exception as exc:  # ONNX Runtime and torch.jit raise their own exception types for a file they reject
        message = (str(exc).strip().splitlines() or [""])[-1]
        raise BundleError(f"the bundle's model file {path} cannot be loaded by {runtime}: {type(exc).__name__}: "
                          f"{message}", where=str(path),
                          fix="install the onnxruntime/torch version the bundle was exported with, or export it "
                          "again: dmlplug export RUN_DIR --out BUNDLE_DIR") from None
    if isinstance(runner, OnnxRunner):
        expected = {"input": ["batch", *input_size], "output": ["batch", embedding_size]}
        for side, declared in (("input", runner.session.get_inputs()[0].shape),
                               ("output", runner.session.get_outputs()[0].shape)):
            fixed = [d if isinstance(d, int) else "batch" for d in declared]
            if fixed != expected[side]:
                raise BundleError(f"the bundle's model file {path} has {side} shape {declared}, but bundle.json "
                                  f"records {expected[side]}", where=str(path),
                                  fix="export the bundle again: dmlplug export RUN_DIR --out BUNDLE_DIR")
    return runner


def load_torchscript(path: str | Path, device: str = "cpu") -> TorchRunner:
    """A runner for ``model.pt``."""
    with warnings.catch_warnings():
        # torch.jit is deprecated in favour of torch.export, but it is the one format loadable without dmlplug.
        warnings.simplefilter("ignore", FutureWarning)
        return TorchRunner(torch.jit.load(str(path), map_location=device), device)


def write_onnx(net: EmbeddingNet, example: torch.Tensor, path: Path, opset: int = 17) -> None:
    """Export ``net`` to ONNX with a dynamic batch axis.

    The TorchScript-based exporter (``dynamo=False``) is used: torch's default dynamo exporter needs the
    ``onnxscript`` package, while this one needs nothing beyond torch and handles every timm backbone.
    """
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        torch.onnx.export(net.eval(), (example,), str(path), dynamo=False, input_names=[INPUT_NAME],
                          output_names=[OUTPUT_NAME], opset_version=opset,
                          dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}})
    import onnx

    onnx.checker.check_model(str(path))


def write_torchscript(net: EmbeddingNet, example: torch.Tensor, path: Path) -> None:
    """Trace ``net`` to TorchScript (tracing, not scripting: timm backbones are not all scriptable)."""
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", FutureWarning)
        traced = torch.jit.trace(net.eval(), example)
        torch.jit.save(traced, str(path))
