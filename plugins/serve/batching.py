"""Dynamic batching: images of concurrent requests embedded together, in one model call.

A request hands its images to :meth:`Batcher.embed` and awaits their rows. One collector task takes the first
waiting image, then keeps taking until the batch holds ``max_batch`` images or ``max_wait_ms`` have passed
since that first image, and runs the model once, in one worker thread (the event loop keeps accepting requests
meanwhile, and the model never runs twice at once in a process, so its threads are the only ones computing).
A lone request waits at most ``max_wait_ms``; under load the batches fill and the wait ends early.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class _Pending:
    image: Any
    future: asyncio.Future[np.ndarray]
    queued: float = field(default_factory=time.perf_counter)


class Batcher:
    """Embeds images from many coroutines in shared batches.

    Args:
        embed: ``list of images -> N×D array``, called from the worker thread with at most ``max_batch`` images.
        max_batch: Most images per model call.
        max_wait_ms: Longest time the first image of a batch waits for others.
        on_batch: Called with ``(batch size, seconds the model took)`` after each model call (metrics).
    """

    def __init__(self, embed: Callable[[list[Any]], np.ndarray], *, max_batch: int, max_wait_ms: float,
                 on_batch: Callable[[int, float], None] | None = None):
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._embed = embed
        self.max_batch = max_batch
        self.max_wait = max(0.0, max_wait_ms) / 1000.0
        self._on_batch = on_batch
        self._queue: asyncio.Queue[_Pending] | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dmlplug-embed")

    async def start(self) -> None:
        """Start the collector on the running event loop."""
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._collect(), name="dmlplug-batcher")

    async def stop(self) -> None:
        """Finish the batches already queued, then stop the collector and the worker thread."""
        if self._task is not None and self._queue is not None:
            await self._queue.join()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._thread.shutdown(wait=True)

    async def embed(self, images: Sequence[Any]) -> np.ndarray:
        """The embeddings of ``images`` (``N×D``, input order), computed in shared batches."""
        if self._queue is None:
            raise RuntimeError("Batcher.start() was not awaited")
        loop = asyncio.get_running_loop()
        pending = [_Pending(image, loop.create_future()) for image in images]
        for item in pending:
            self._queue.put_nowait(item)
        rows = await asyncio.gather(*(item.future for item in pending))
        return np.stack(rows) if rows else np.empty((0, 0), dtype=np.float32)

    async def _collect(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            deadline = batch[0].queued + self.max_wait
            while len(batch) < self.max_batch:
                if not self._queue.empty():
                    batch.append(self._queue.get_nowait())
                    continue
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), timeout=left))
                except TimeoutError:
                    break
            await self._run(loop, batch)

    async def _run(self, loop: asyncio.AbstractEventLoop, batch: list[_Pending]) -> None:
        assert self._queue is not None
        started = time.perf_counter()
        try:
            rows = await loop.run_in_executor(self._thread, self._embed, [item.image for item in batch])
        except Exception as exc:  # handed to every waiting request, which reports it
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(exc)
        else:
            for item, row in zip(batch, rows, strict=True):
                if not item.future.done():  # a client that went away cancelled its future
                    item.future.set_result(row)
            if self._on_batch is not None:
                self._on_batch(len(batch), time.perf_counter() - started)
        finally:
            for _ in batch:
                self._queue.task_done()
