"""TensorBoard event files of a resumed run: drop the events logged after the checkpoint, once per run start.

A run killed after a checkpoint may have written events past it (SummaryWriter flushes every few events);
the resumed run logs those steps again. TensorBoard's ``purge_step`` hides them only when the file carrying the
purge marker is read before every other new file of the directory, which two writers (``tensorboard`` and
``record_keeper`` share ``tb/``) cannot guarantee: the second marker hides the first writer's new events.
So the old files are rewritten instead, keeping the events up to the checkpoint's step, before any writer of
the resumed run opens the directory; the result reads the same as an uninterrupted run's events in any reader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dmlplug.files import atomic_write

#: Event directories already prepared for the run now in progress: ``{directory: run view}``.
_prepared: dict[Path, Any] = {}


def prepare(log_dir: Path, run: Any) -> None:
    """Before opening a SummaryWriter in ``log_dir``: on a resume, trim the old event files to ``run.step``.

    Called by every logger that writes events; only the first call of a run start trims, so no file that a
    writer of this run already holds open is rewritten.
    """
    key = Path(log_dir).resolve()
    if _prepared.get(key) is run:
        return
    _prepared[key] = run
    if run.resumed:
        trim_events(key, run.step)


def release(log_dir: Path, run: Any) -> None:
    """At the end of the run: forget it (the registry keeps no run alive)."""
    key = Path(log_dir).resolve()
    if _prepared.get(key) is run:
        del _prepared[key]


def trim_events(log_dir: Path, step: int) -> int:
    """Rewrite the event files of ``log_dir`` without the events after optimizer step ``step``.

    Returns:
        The number of events dropped.
    """
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    dropped = 0
    for path in sorted(Path(log_dir).glob("events.out.tfevents.*")):
        kept, size, cut = [], 0, 0
        for raw in RawEventFileLoader(str(path)).Load():  # stops before a record cut by a kill
            size += len(raw) + 16  # length (8), its CRC (4), data, data CRC (4)
            if event_pb2.Event.FromString(raw).step <= step:
                kept.append(raw)
            else:
                cut += 1
        if cut or size != path.stat().st_size:
            def write(handle: Any, kept: list[bytes] = kept) -> None:
                writer = RecordWriter(handle)
                for raw in kept:
                    writer.write(raw)

            atomic_write(path, write)
        dropped += cut
    return dropped
