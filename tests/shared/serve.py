"""``dmlplug serve`` as a real process on the loopback address, for the service's tests and its benchmark."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

#: The line `dmlplug serve` prints once it listens.
URL_LINE = re.compile(r"dmlplug serve: (http://127\.0\.0\.1:\d+/)")


class Server:
    """A ``dmlplug serve BUNDLE INDEX --port 0`` process; ``url`` once it answers ``/readyz``.

    Args:
        bundle: The bundle folder.
        index: The index folder.
        args: More options of the command.
        log: Where its stderr goes (read for the URL and for the stop line).
        timeout: Seconds to wait for it to be ready.
        cwd: Its working directory (relative paths are taken from there).
    """

    def __init__(self, bundle: Path, index: Path, *args: str, log: Path, timeout: float = 120.0,
                 cwd: Path | None = None):
        self.log = log
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(log, "wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "dmlplug", "serve", str(bundle), str(index), "--port", "0",
                 "--log-level", "warning", *args], stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=cwd)
        self.url = self._wait_for_url(timeout)

    def _wait_for_url(self, timeout: float) -> str:
        import httpx

        deadline = time.monotonic() + timeout
        url = None
        #: Requests the readiness wait had answered (the server counts them among the requests it answered).
        self.answered_while_starting = 0
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"dmlplug serve exited {self.process.returncode}:\n{self.stderr()}")
            if url is None and (found := URL_LINE.search(self.stderr())):
                url = found.group(1)
            if url is not None:
                try:
                    status = httpx.get(url + "readyz", timeout=5).status_code
                    self.answered_while_starting += 1
                    if status == 200:
                        return url
                except httpx.TransportError:
                    pass
            time.sleep(0.1)
        self.process.kill()
        raise RuntimeError(f"dmlplug serve was not ready within {timeout} s:\n{self.stderr()}")

    def stderr(self) -> str:
        """What the server has written to stderr so far."""
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Send ``sig`` and wait for the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *_: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)
