"""Credentials never reach a file dmlplug writes: the one masking of passwords in command lines and URLs.

A database URL on the command line (``dmlplug tune run --storage postgresql://user:password@host/db``) would
otherwise be copied into every run's ``environment.json`` (``command``), every resume record and every message.
:func:`mask_secrets` replaces the password of any ``scheme://user:password@host`` URL in a text, and the value of
``password=``/``token=``-style options, by ``***``; :func:`masked_argv` is the process's command line masked.
Public API: a plugin that records a command line or a URL masks it with these.
"""

from __future__ import annotations

import re
import sys

#: ``scheme://user:password@``: the password (anything up to the ``@`` of the host, no ``/`` in it).
_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^/@:\s]*:)(?P<secret>[^/@\s]+)(?P<at>@)")
#: ``--password=x``, ``password=x``, ``api_key: x`` … in options and query strings.
_KEY_VALUE = re.compile(r"(?P<head>(?:^|[\s?&;,-])[\w-]*?(?:password|passwd|pwd|token|secret|api[_-]?key)"
                        r"[\"']?\s*[=:]\s*[\"']?)(?P<secret>[^\s&;,\"']+)", re.IGNORECASE)

MASK = "***"


def mask_secrets(text: str) -> str:
    """``text`` with the passwords of URLs and the values of password/token options replaced by ``***``.

    >>> mask_secrets("postgresql://ann:pw@db:5432/tune?sslmode=require")
    'postgresql://ann:***@db:5432/tune?sslmode=require'
    """
    text = _URL_PASSWORD.sub(lambda m: m["head"] + MASK + m["at"], text)
    return _KEY_VALUE.sub(lambda m: m["head"] + MASK, text)


def masked_argv() -> list[str]:
    """The process's command line (``sys.argv``) with every secret masked: what a run directory records."""
    return [mask_secrets(arg) for arg in sys.argv]
