"""``dmlplug serve BUNDLE INDEX``: the service from the command line (docs/serve.md).

The bundle and the index are loaded and verified before a port is bound, so a bad one exits 2 with the same
message as ``dmlplug search``. The command binds the socket itself (``--port 0`` takes a free port, and the URL
printed is the real one), then hands it to uvicorn: one process, or ``--workers N`` processes sharing it under
uvicorn's supervisor. SIGTERM and Ctrl-C stop accepting, let the requests in flight finish, and exit 0.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from dmlplug.errors import DmlplugError

from .decode import DEFAULT_MAX_PIXELS

#: Seconds the requests in flight get to finish after SIGTERM / Ctrl-C.
GRACEFUL_SECONDS = 30
#: The GIL switch interval of a server process (Python's default is 5 ms; see :func:`prepare_process`).
SWITCH_INTERVAL_S = 0.001


def cmd_serve(
    bundle_dir: Annotated[Path, typer.Argument(help="A bundle folder (dmlplug export).", show_default=False)],
    index_dir: Annotated[Path, typer.Argument(help="An index folder built by the bundle (dmlplug index).",
                                              show_default=False)],
    host: Annotated[str, typer.Option(help="Address to listen on; the default answers this machine only.")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free one; the URL printed says which).")]
    = 8000,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes; each loads the model and gets the "
                                                     "cores shared out (--threads).")] = 1,
    api_key_file: Annotated[Path | None, typer.Option(help="A file (mode 600) holding the key that adding and "
                                                           "removing items need; without it writes are refused.",
                                                      show_default=False)] = None,
    max_batch: Annotated[int, typer.Option(min=1, help="Most images embedded in one model call (concurrent "
                                                       "requests share it).")] = 32,
    max_wait_ms: Annotated[float, typer.Option(min=0, help="Longest wait of an image for others to batch "
                                                           "with.")] = 5.0,
    inline_ms: Annotated[float, typer.Option(min=0, help="Longest model call of a request alone (as recent ones "
                                                         "predict it) run on the event loop instead of the model's "
                                                         "thread; 0: always the thread.")] = 5.0,
    rerank: Annotated[str | None, typer.Option(metavar="METHOD", help="Default re-ranker of searches, as "
                                                                      "name:k=v,... (dmlplug list rerankers); a "
                                                                      "request may name another.",
                                               show_default=False)] = None,
    max_body_mb: Annotated[float, typer.Option(min=0.001, help="Largest request body, in MiB.")] = 32.0,
    max_pixels: Annotated[int, typer.Option(min=1, help="Largest image (width × height) decoded.")]
    = DEFAULT_MAX_PIXELS,
    max_images: Annotated[int, typer.Option(min=1, help="Most images per request.")] = 64,
    threads: Annotated[int | None, typer.Option(min=1, help="Model threads per worker (default: the cores "
                                                            "divided by --workers).", show_default=False)] = None,
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    log_level: Annotated[str, typer.Option(help="uvicorn's log level (warning: no access log).")] = "info",
) -> None:
    """Serve a bundle and its index over HTTP: search API, web page, health, metrics (docs/serve.md)."""
    _require_extra()
    from dmlplug import plugin_host

    from .auth import read_api_key
    from .service import SearchService
    from .settings import SETTINGS_VARIABLE, ServeSettings

    settings = ServeSettings(bundle=str(bundle_dir), index=str(index_dir), host=host, port=port, workers=workers,
                             api_key_file=None if api_key_file is None else str(api_key_file), max_batch=max_batch,
                             max_wait_ms=max_wait_ms, inline_ms=inline_ms, rerank=rerank, max_body_mb=max_body_mb,
                             max_pixels=max_pixels, max_images=max_images, threads=threads, device=device)
    key = read_api_key(api_key_file) if api_key_file is not None else None
    service = SearchService(settings, plugin_host().registry)  # every check of `dmlplug search`, before binding
    prepare_process(settings)
    sock = _bind(host, port)
    url = f"http://{_url_host(host)}:{sock.getsockname()[1]}/"
    typer.echo(f"dmlplug serve: {url} ({service.index().size} items, {workers} worker(s); API docs at {url}docs; "
               "Ctrl-C stops)", err=True)
    if workers == 1:
        from .app import create_app

        app = create_app(service, settings, key)
        freeze_startup_objects()
        _run_one(app, sock, log_level)
    else:
        del service  # verified; each worker loads its own, the supervisor needs none
        os.environ[SETTINGS_VARIABLE] = settings.model_dump_json()
        with tempfile.TemporaryDirectory(prefix="dmlplug-serve-metrics-") as metrics_dir:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
            _run_workers(sock, workers, log_level)


def _require_extra() -> None:
    """Refuse at once, saying what to install, when a package of the ``serve`` extra is missing."""
    import importlib.util

    from . import SERVE_PACKAGES

    missing = [name for name in SERVE_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise DmlplugError(f"dmlplug serve needs {', '.join(missing)}, which are not installed",
                           where="dmlplug serve", fix='pip install "dmlplug[serve]"')


def prepare_process(settings: Any) -> None:
    """Set what a server process shares among its requests: torch's threads and the GIL's switch interval.

    Process-wide, so only where a server process starts (here and in each worker), never in the service.
    Torch gets the model threads of a worker (ONNX Runtime's session has its own). The switch interval is how
    long a thread that wants the GIL waits before asking the holder to let go: the model thread wants it back
    after every model call (and every large upload it decodes) while the event loop holds it, and at Python's
    default of 5 ms each of those hand-backs could cost more than embedding a small image (a 32-px image takes
    ~0.5 ms of ONNX Runtime); 1 ms gave ~10% more images/s at concurrency 8 (docs/performance.md, Serving).
    """
    import torch

    torch.set_num_threads(settings.model_threads())
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def freeze_startup_objects() -> None:
    """Keep what start-up built (modules, the model, the index: ~400,000 objects) out of later garbage collections.

    Python's full collection walks every object it tracks; over a server's heap that takes ~170 ms, a stall every
    request in flight waits for (p99 latencies of 200 ms where p50 was 30). Objects that live as long as the
    process need not be walked: ``gc.freeze`` moves them to a generation the collector ignores.
    """
    import gc

    gc.collect()
    gc.freeze()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or a clear error (the port is taken, the address is not local)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto TCP, not 0: asyncio turns Nagle's algorithm off only on TCP sockets, and with it on every response's
    # body, written after its headers, waited for the client's delayed ACK (40 ms a request)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise DmlplugError(f"cannot listen on {host}:{port}: {exc.strerror}", where="--host / --port",
                           fix="choose a free port (--port 0 takes any) or an address of this machine") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _config(app: Any, log_level: str, **extra: Any) -> Any:
    import uvicorn

    return uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=GRACEFUL_SECONDS,
                          server_header=False, **extra)


def _run_one(app: Any, sock: socket.socket, log_level: str) -> None:
    """Serve ``app`` in this process until SIGTERM or Ctrl-C; the requests in flight finish first."""
    import uvicorn

    # uvicorn re-raises the signal that stopped it once it has shut down, to the handler found before it ran:
    # a quiet one for SIGTERM, and Ctrl-C's KeyboardInterrupt caught here, so a clean stop exits 0.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    server = uvicorn.Server(_config(app, log_level))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()
    if not server.started:
        raise DmlplugError("the server did not start (its log above says why)", where="dmlplug serve")


def _run_workers(sock: socket.socket, workers: int, log_level: str) -> None:
    """Serve with ``workers`` processes under uvicorn's supervisor, each building its app from the environment."""
    from uvicorn.supervisors import Multiprocess

    config = _config("dmlplug_builtins.serve.app:app_from_environment", log_level, factory=True, workers=workers)
    try:
        Multiprocess(config, sockets=[sock]).run()
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
