"""Built-in plugin ``serve``: ``dmlplug serve BUNDLE INDEX``, retrieval as an HTTP service (docs/serve.md).

A FastAPI app on uvicorn over a verified bundle and index: ``POST /v1/search`` (images or vectors),
``POST /v1/embed``, ``POST /v1/items`` and ``DELETE /v1/items/{id}`` (with an API key), ``/healthz``, ``/readyz``,
``/metrics`` (Prometheus) and a search page at ``/``. It uses dmlplug's public API only
(:mod:`dmlplug.bundle.api`), as any plugin could. Modules: :mod:`.command` (the command), :mod:`.app` (routes),
:mod:`.service` (bundle, index, writes), :mod:`.batching` (dynamic batching), :mod:`.form` (multipart bodies, by
python-multipart's parser), :mod:`.decode` (safe image decoding), :mod:`.limits` (body size), :mod:`.auth` (API
key), :mod:`.metrics`, :mod:`.settings`, ``page/``.

It needs the ``serve`` extra (``pip install "dmlplug[serve]"``); without it the command says so. Nothing here is
imported until the command runs, so the CLI starts as fast without it.
"""

from __future__ import annotations

from typing import Any

from dmlplug import hookimpl

#: The packages of the ``serve`` extra, by import name.
SERVE_PACKAGES = ("fastapi", "uvicorn", "multipart", "prometheus_client")


@hookimpl
def register_commands(app: Any) -> None:
    """Add ``dmlplug serve``."""
    from .command import cmd_serve

    app.command("serve")(cmd_serve)
