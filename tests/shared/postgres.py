"""A real PostgreSQL server in a temporary directory on 127.0.0.1, for the shared-storage tests.

Debian's ``postgresql`` package puts the server binaries in /usr/lib/postgresql/<version>/bin (``.ci/run``
installs it). The server refuses to run as root, so under root (CI) every server command runs as the
``postgres`` user through ``runuser``.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path


def server_binaries() -> Path | None:
    """The folder holding initdb and pg_ctl, or None when PostgreSQL is not installed."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(folder, "initdb").is_file() and Path(folder, "pg_ctl").is_file():
            return Path(folder)
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def postgres_server():
    """Start a throw-away server; yields the URL of an empty database ``tune`` (user ``dmlplug``, trust auth)."""
    binaries = server_binaries()
    assert binaries is not None
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="dmlplug-pg-"))
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        os.chmod(folder, 0o755)
        shutil.chown(folder, "postgres", "postgres")
    data, log = folder / "data", folder / "server.log"
    port = free_port()

    def run(*command: str) -> None:
        subprocess.run([*as_user, *command], check=True, capture_output=True, timeout=120)

    try:
        run(str(binaries / "initdb"), "-D", str(data), "-U", "dmlplug", "--auth=trust", "-E", "UTF8")
        run(str(binaries / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o",
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1", "start")
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                connection = psycopg.connect(host="127.0.0.1", port=port, user="dmlplug", dbname="postgres",
                                             autocommit=True)
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        connection.execute("CREATE DATABASE tune")
        connection.close()
        yield f"postgresql://dmlplug@127.0.0.1:{port}/tune"
    finally:
        subprocess.run([*as_user, str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)
