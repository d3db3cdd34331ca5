"""The sha256 a checkpoint carries: written into the zip comment of the archive torch.save writes.

``torch.save`` writes a zip archive, which ends with its end-of-central-directory record, whose last field is
the length of a free-form comment (empty). :func:`save_checkpoint <dmlplug.checkpoints.save_checkpoint>` writes
the archive through a :class:`SealingWriter`, which hashes every byte up to that length field and ends the file
with the comment ``dmlplug-sha256:<hex>``. torch.load, like every zip reader, ignores the comment; the checksum
stays inside the one file (``best.pt``, a copy of ``last.pt``, and a checkpoint copied alone keep theirs) and
is written by the same atomic rename as the data, so no crash can leave a file and its checksum apart.
:func:`seal_matches` recomputes it before a checkpoint is loaded: a file truncated by a copy, overwritten in
place or damaged on disk is then reported as damaged instead of loading weights that evaluate to NaN.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any, BinaryIO

from dmlplug.files import sha256_file

_PREFIX = b"dmlplug-sha256:"
_COMMENT = len(_PREFIX) + 64
#: The end-of-central-directory record: its signature, 16 bytes of fields, then the comment length.
_EOCD, _EOCD_SIZE = b"PK\x05\x06", 22
#: The bytes after the digested part of a sealed file: the comment length and the comment.
_SEAL_SIZE = 2 + _COMMENT


class SealingWriter:
    """A file object for ``torch.save`` that forwards to ``out`` and ends the archive with its sha256.

    The last 22 bytes written are held back: when they are an end-of-central-directory record without a
    comment, :meth:`seal` writes them with the comment holding the digest of everything before the comment
    length; anything else (not a zip archive) is written as it came, unsealed.

    Args:
        out: The file being written.
    """

    def __init__(self, out: BinaryIO):
        import hashlib

        self._out = out
        self._hash = hashlib.sha256()
        self._held = b""

    def _emit(self, data: Any) -> None:
        if len(data):
            self._hash.update(data)
            self._out.write(data)

    def write(self, data: Any) -> int:
        """Forward ``data`` (bytes or a buffer), holding back the last 22 bytes of the stream."""
        view = memoryview(data).cast("B")
        if len(view) >= _EOCD_SIZE:  # the usual case: no copy of a large block
            self._emit(self._held)
            self._emit(view[:-_EOCD_SIZE])
            self._held = bytes(view[-_EOCD_SIZE:])
        else:
            joined = self._held + bytes(view)
            self._emit(joined[:-_EOCD_SIZE])
            self._held = joined[-_EOCD_SIZE:]
        return len(view)

    def flush(self) -> None:
        """Flush ``out`` (torch.save calls it before closing the archive: the held bytes stay held)."""
        self._out.flush()

    def seal(self) -> bool:
        """Write the held bytes, sealed when they end a zip archive; whether the file is sealed."""
        held = self._held
        if len(held) != _EOCD_SIZE or not held.startswith(_EOCD) or held[-2:] != b"\0\0":
            self._emit(held)
            return False
        self._emit(held[:-2])
        self._out.write(struct.pack("<H", _COMMENT) + _PREFIX + self._hash.hexdigest().encode())
        return True


def _tail(path: Path) -> bytes:
    """The bytes a seal occupies at the end of ``path`` (fewer for a smaller file)."""
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        handle.seek(max(0, size - _EOCD_SIZE - _COMMENT))
        return handle.read()


def read_seal(path: Path) -> str | None:
    """The sha256 a checkpoint's comment records, or ``None`` when it carries none.

    None: written before checkpoints were sealed, or not by dmlplug, or its end was cut off.

    Raises:
        OSError: The file cannot be read.
    """
    tail = _tail(path)
    record, comment = tail[:_EOCD_SIZE], tail[_EOCD_SIZE:]
    if not record.startswith(_EOCD) or record[-2:] != struct.pack("<H", _COMMENT) or not comment.startswith(_PREFIX):
        return None
    return comment[len(_PREFIX):].decode("ascii", errors="replace")


def seal_matches(path: Path) -> bool | None:
    """Whether a checkpoint's content has the sha256 it was sealed with (``None``: it carries none).

    A file whose seal is there but cut short (a copy that stopped a few bytes early) does not match.

    Raises:
        OSError: The file cannot be read.
    """
    recorded = read_seal(path)
    if recorded is None:
        return False if _PREFIX in _tail(path) else None
    return sha256_file(path, length=os.path.getsize(path) - _SEAL_SIZE) == recorded
