"""Read back what W&B wrote for an offline run: its ``.wandb`` transaction logs, one per process that logged to it.

The file is a LevelDB-style log (W&B's format since its first SDK): a 7-byte header ``:W&B``, magic ``0xBEE1``
(little-endian), version 0; then 32 KiB blocks of records, each with a 7-byte header (CRC-32C, length as a
little-endian uint16, type: 1 full, 2 first, 3 middle, 4 last fragment) whose payloads, joined, are serialized
``wandb_internal_pb2.Record`` messages. A block never ends in a partial header: fewer than 7 bytes left are zeros.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def records(path: Path) -> list[Any]:
    """Every complete record of a transaction log; a torn record at the end (a killed writer) is left out."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B" and struct.unpack("<HB", data[4:7]) == (0xBEE1, 0), data[:7]
    out, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:  # zero padding of the block
            pos += left
            continue
        payload = data[pos + 7:pos + 7 + length]
        if len(payload) < length:
            break
        pos += 7 + length
        if kind in (_FIRST, _MIDDLE):
            pending = (b"" if kind == _FIRST else pending) + payload
            continue
        record = wandb_internal_pb2.Record()
        record.ParseFromString(pending + payload if kind == _LAST else payload)
        pending = b""
        out.append(record)
    return out


def _nested(items) -> dict[str, Any]:
    """History, summary or config items (``key`` or ``nested_key`` + ``value_json``) as a nested dict."""
    row: dict[str, Any] = {}
    for item in items:
        keys = list(item.nested_key) or [item.key]
        target = row
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = json.loads(item.value_json)
    return row


@dataclass
class Segment:
    """What one process wrote to a W&B run (one ``offline-run-*`` folder)."""

    folder: Path
    run: Any = None  #: the RunRecord (id, project, display name, tags, group, ``resume`` …)
    config: dict[str, Any] = field(default_factory=dict)  #: the config, with every update applied
    history: list[dict[str, Any]] = field(default_factory=list)  #: logged rows (``_step``, ``_timestamp`` …)
    summary: dict[str, Any] = field(default_factory=dict)  #: the summary, with every update applied
    files: list[str] = field(default_factory=list)  #: paths of the files saved to the run
    exit_code: int | None = None  #: ``None`` when the process never finished the run (killed)


def read_segment(folder: Path) -> Segment:
    """One ``offline-run-<time>-<id>`` folder read back from its ``run-<id>.wandb`` file."""
    (log,) = Path(folder).glob("run-*.wandb")
    segment = Segment(Path(folder))
    for record in records(log):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            segment.run = record.run
            segment.config.update(_nested(record.run.config.update))
        elif kind == "config":
            segment.config.update(_nested(record.config.update))
        elif kind == "history":
            segment.history.append(_nested(record.history.item))
        elif kind == "summary":
            segment.summary.update(_nested(record.summary.update))
        elif kind == "files":
            segment.files.extend(f.path for f in record.files.files)
        elif kind == "exit":
            segment.exit_code = record.exit.exit_code
    return segment


def read_run(run_id: str, *roots: Path) -> list[Segment]:
    """Every segment of the W&B run ``run_id`` under the ``wandb/`` folders of ``roots``, oldest first."""
    folders = [f for root in roots for f in (Path(root) / "wandb").glob(f"offline-run-*-{run_id}*") if f.is_dir()]
    segments = [read_segment(f) for f in folders]
    return sorted(segments, key=lambda s: (s.run.start_time.seconds, s.run.start_time.nanos))
