"""Credentials never reach a file dmlplug writes: the one masking of passwords in command lines and URLs.

A database URL on the command line (``dmlplug tune run --storage postgresql://user:password@host/db``) would
otherwise be copied into every run's ``environment.json`` (``command``), every resume record and every message.
:func:`mask_secrets` replaces the password of any ``scheme://user:password@host`` URL in a text, and the value of
``password=``/``token=``-style options, by ``***``; :func:`masked_argv` is the process's command line masked,
:func:`mask_values` a mapping of recorded values (a tracker's parameters: the flattened recipe), and
:func:`copy_masked` a text file sent elsewhere. Environment variables are never recorded, so credentials kept in
them (``PGPASSWORD``, ``MLFLOW_TRACKING_PASSWORD``, ``WANDB_API_KEY``) need no masking.
Public API: a plugin that records a command line, a URL or recipe values masks them with these.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


#: A key that names a secret (``password``, ``db_password``, ``api_key``, ``wandb.token``): its value is masked whole.
_SECRET_KEY = re.compile(r"(?:^|[\W_])(?:password|passwd|pwd|token|secret|api[_-]?key)$", re.IGNORECASE)


def mask_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` (a flattened recipe, a tracker's parameters) as they may be recorded.

    The value of a key that names a secret becomes ``***``; text, also inside lists and dicts, goes through
    :func:`mask_secrets`; other values are kept.

    >>> mask_values({"loggers[1].tracking_uri": "http://ann:pw@mlflow:5000", "db.password": "pw", "lr": 0.1})
    {'loggers[1].tracking_uri': 'http://ann:***@mlflow:5000', 'db.password': '***', 'lr': 0.1}
    """
    return {key: MASK if _SECRET_KEY.search(str(key)) and value not in (None, "") else _masked(value)
            for key, value in values.items()}


def _masked(value: Any) -> Any:
    if isinstance(value, str):
        return mask_secrets(value)
    if isinstance(value, list | tuple):
        return type(value)(_masked(item) for item in value)
    if isinstance(value, Mapping):
        return mask_values(value)
    return value


def copy_masked(source: Path, target: Path) -> Path:
    """Copy the text file ``source`` to ``target`` with its secrets masked: a run's file sent to a tracker.

    ``recipe.resolved.toml`` holds what the recipe interpolated (``${MLFLOW_URI}``), so a copy that leaves the
    run directory is masked. Returns ``target``.
    """
    target.write_text(mask_secrets(source.read_text(encoding="utf-8")), encoding="utf-8")
    return target
