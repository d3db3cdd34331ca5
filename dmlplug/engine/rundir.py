"""The self-describing run directory: layout, environment record, metrics log."""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dmlplug.errors import RunError
from dmlplug.secrets import masked_argv

#: Files of a run directory (see docs/run-directory.md).
RESOLVED_RECIPE = "recipe.resolved.toml"
ENVIRONMENT = "environment.json"
METRICS_LOG = "metrics.jsonl"
RESULTS = "results.json"
CHECKPOINTS = "checkpoints"


def choose_run_dir(output_dir: str, name: str, out: str | Path | None) -> Path:
    """The run directory: ``out`` if given, else ``<output_dir>/<name>/<YYYYmmdd-HHMMSS>``."""
    if out is not None:
        return Path(out)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = Path(output_dir) / name / stamp
    suffix = 1
    while path.exists():  # two runs started within the same second
        path = Path(output_dir) / name / f"{stamp}-{suffix}"
        suffix += 1
    return path


def check_writable(directory: Path) -> None:
    """Fail early, before anything heavy is built, when the run directory cannot be written.

    Raises:
        RunError: The directory exists and is not empty, or its parent cannot be written.
    """
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise RunError(
            f"output directory already exists and is not empty: {directory}",
            where="--out / run.output_dir",
            fix="choose a new directory (runs never overwrite each other)",
        )
    parent = directory
    while not parent.exists():
        parent = parent.parent
    try:
        if not parent.is_dir():
            raise OSError(f"{parent} is not a directory")
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".dmlplug-write-test"):
            pass
    except OSError as exc:
        raise RunError(
            f"cannot write the run directory {directory}: {exc.strerror or exc}",
            where="--out / run.output_dir",
            fix="choose a writable location with --out DIR or --set run.output_dir=DIR",
        ) from None


def environment_record(device: str, seed: int, host: Any, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Versions and settings that make a run reproducible."""
    import torch

    try:
        import faiss

        faiss_version = getattr(faiss, "__version__", "unknown")
        faiss_gpu = hasattr(faiss, "StandardGpuResources")
    except ImportError:
        faiss_version, faiss_gpu = None, False
    from dmlplug.distributions import installed_version as version

    record = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "faiss": faiss_version,
        "faiss_gpu": faiss_gpu,
        "pytorch_metric_learning": version("pytorch-metric-learning"),
        "timm": version("timm"),
        "dmlplug": version("dmlplug"),
        "device": device,
        "seed": seed,
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "plugins": [
            {"name": r.name, "module": r.module, "distribution": r.distribution, "version": r.version,
             "builtin": r.builtin, "error": r.error}
            for r in host.records.values()
        ],
        "command": masked_argv(),  # a --storage URL's password never reaches the file
    }
    record.update(extra or {})
    return record


def append_metrics(directory: Path, record: dict[str, Any]) -> None:
    """Append one evaluation record to ``metrics.jsonl`` (one write call per line)."""
    line = json.dumps(record, default=float) + "\n"
    with open(directory / METRICS_LOG, "a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
