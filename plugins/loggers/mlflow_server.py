"""Is the MLflow tracking server there? One short request when the ``mlflow`` logger is built, before the run starts.

The MLflow client retries a request that cannot connect with exponential back-off (7 retries by default, about four
minutes), and the logger's first request comes only at ``on_run_start``, after the run directory was written: an
unreachable server cost minutes and left a failed run behind. :func:`require_tracking_server` asks the server's
``/health`` endpoint once, with a timeout of a few seconds, while the logger is built: a failure then stops the run
before its directory exists.

Only what certainly means "no server" fails: no connection (refused, unreachable, a name that does not resolve, no
answer within the timeout) or an answer with a 5xx status (a proxy whose backend is down; MLflow retries those too).
Any other answer (401, 403, 404 from a proxy that keeps ``/health`` to itself) or a TLS certificate the standard
library does not trust (MLflow may be told to, ``MLFLOW_TRACKING_INSECURE_TLS``) lets the run go on: the client then
speaks for itself. Local stores (``sqlite:///…``, a folder) and other schemes (``databricks``) are not probed.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.parse
import urllib.request

from dmlplug.errors import RunError
from dmlplug.secrets import mask_secrets

#: Seconds the probe waits for a connection and for the answer.
TIMEOUT_S = 5.0


def tracking_uri(configured: str | None) -> tuple[str, str]:
    """``(uri, where it comes from)``: the logger's ``tracking_uri``, else MLflow's own default."""
    if configured:
        return configured, "[[loggers]] mlflow: tracking_uri"
    from mlflow.tracking import get_tracking_uri

    return get_tracking_uri(), "MLflow's default tracking URI (MLFLOW_TRACKING_URI)"


def require_tracking_server(configured: str | None, *, timeout: float = TIMEOUT_S) -> None:
    """Fail within ``timeout`` seconds when an ``http(s)`` tracking server does not answer.

    Args:
        configured: The logger's ``tracking_uri`` (``None``: MLflow's default, from ``MLFLOW_TRACKING_URI``).
        timeout: Seconds to wait for the connection and the answer.

    Raises:
        RunError: No connection, or a 5xx answer; the message names the URI (password masked), what failed and
            how to fix it.
    """
    uri, where = tracking_uri(configured)
    problem = probe(uri, timeout=timeout)
    if problem is None:
        return
    raise RunError(f"the MLflow tracking server {mask_secrets(uri)} does not answer: {problem}", where=where,
                   fix="start the server (e.g. `mlflow server --host 127.0.0.1 --port 5000`) or wait until it is up, "
                       "correct tracking_uri (or MLFLOW_TRACKING_URI), or remove the mlflow logger from [[loggers]]")


def probe(uri: str, *, timeout: float = TIMEOUT_S) -> str | None:
    """What is wrong with the server at ``uri`` (one ``GET <uri>/health``), or ``None`` when it answers.

    ``None`` too for a URI that is not ``http(s)`` (nothing to ask) and for the answers that prove a server is there
    (see the module docstring).
    """
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    # The credentials of user:password@host stay out of the request: /health needs none.
    netloc = parts.netloc.rpartition("@")[2]
    url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + "/health", "", ""))
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return None
    except urllib.error.HTTPError as exc:
        return f"GET /health answered {exc.code} {exc.reason}" if exc.code >= 500 else None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ssl.SSLError):
            return None  # it answered; whether its certificate is trusted is MLflow's settings' business
        return _reason(exc.reason, timeout)
    except (TimeoutError, OSError) as exc:  # a timeout while reading the answer, a reset connection
        return _reason(exc, timeout)


def _reason(reason: object, timeout: float) -> str:
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror[:1].lower() + reason.strerror[1:]
    return str(reason)
