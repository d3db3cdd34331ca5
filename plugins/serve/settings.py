"""The settings of one server, as the command line gives them and as worker processes receive them."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

from .decode import DEFAULT_MAX_PIXELS

#: The environment variable that hands the settings to worker processes (``--workers N``), as JSON.
SETTINGS_VARIABLE = "DMLPLUG_SERVE_SETTINGS"


class ServeSettings(BaseModel):
    """Everything a worker needs to serve (the API key itself is not here: each worker reads its file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bundle: str
    index: str
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    workers: int = Field(1, ge=1)
    api_key_file: str | None = None
    max_batch: int = Field(32, ge=1)
    max_wait_ms: float = Field(5.0, ge=0)
    inline_ms: float = Field(5.0, ge=0)
    rerank: str | None = None
    max_body_mb: float = Field(32.0, gt=0)
    max_pixels: int = Field(DEFAULT_MAX_PIXELS, ge=1)
    max_images: int = Field(64, ge=1)
    threads: int | None = Field(None, ge=1)
    device: str = "cpu"

    @property
    def max_body_bytes(self) -> int:
        """The body limit in bytes."""
        return int(self.max_body_mb * 1024 * 1024)

    def model_threads(self) -> int:
        """Threads of the model per worker: the cores shared out among the workers (at least one each)."""
        if self.threads is not None:
            return self.threads
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return max(1, cores // self.workers)
