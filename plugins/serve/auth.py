"""The API key that guards writes (``POST /v1/items``, ``DELETE /v1/items/{id}``).

The key is read once from ``--api-key-file`` (never from the command line, where ``ps`` shows it to every user
of the machine) and compared in constant time. Neither the key nor what a client sent is ever logged or
echoed: the errors say only that the key is missing or wrong.
"""

from __future__ import annotations

import hmac
import stat
from pathlib import Path

from dmlplug.errors import DmlplugError

#: Shortest key accepted: 16 bytes of a random token (``python -c "import secrets; print(secrets.token_hex(16))"``).
MIN_KEY_LENGTH = 16


def read_api_key(path: str | Path) -> bytes:
    """The key in ``path`` (surrounding whitespace removed).

    Raises:
        DmlplugError: The file cannot be read, holds a key shorter than :data:`MIN_KEY_LENGTH`, or is readable by
            other users of the machine.
    """
    file = Path(path)
    fix = (f"write a random key of at least {MIN_KEY_LENGTH} characters to a file only you can read: "
           f"python -c \"import secrets; print(secrets.token_hex(16))\" > {file} && chmod 600 {file}")
    try:
        mode = file.stat().st_mode
        key = file.read_bytes().strip()
    except OSError as exc:
        raise DmlplugError(f"cannot read the API key file: {exc.strerror}", where=f"--api-key-file {file}",
                           fix=fix) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise DmlplugError(f"the API key file is readable by other users (mode {stat.filemode(mode)})",
                           where=f"--api-key-file {file}", fix=f"chmod 600 {file}")
    if len(key) < MIN_KEY_LENGTH:
        raise DmlplugError(f"the API key is {len(key)} characters long, fewer than {MIN_KEY_LENGTH}",
                           where=f"--api-key-file {file}", fix=fix)
    return key


def key_matches(expected: bytes, given: str | None) -> bool:
    """Whether the client's key equals ``expected``, compared in constant time."""
    if given is None:
        return False
    return hmac.compare_digest(expected, given.encode("utf-8", "surrogateescape"))


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, else ``None``."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None

