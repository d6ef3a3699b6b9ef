"""Private, throw-away PostgreSQL and Redis servers for the tests (real servers from
Debian's packages, on loopback, in a temporary directory, gone when the block ends)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

READY_TIMEOUT_S = 30.0


class ServiceError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServiceError(f"{what} exited with code {process.returncode} while starting")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.1)
    raise ServiceError(f"{what} did not listen on port {port} within {READY_TIMEOUT_S:.0f} s")


def _postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise ServiceError(
            "PostgreSQL is not installed: run 'make setup' (apt-get install postgresql)"
        )
    return Path(found[-1]).parent


def _as_postgres(cmd: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; CI runs as root, a developer may not.
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextlib.contextmanager
def temporary_postgres() -> Iterator[str]:
    """Yield a DATABASE_URL for a fresh PostgreSQL cluster with an empty database."""
    bindir = _postgres_bin()
    root = Path(tempfile.mkdtemp(prefix="wattlease-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    data = root / "data"
    port = free_port()
    subprocess.run(
        _as_postgres(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    server = subprocess.Popen(
        _as_postgres(
            [
                str(bindir / "postgres"),
                "-D",
                str(data),
                "-p",
                str(port),
                "-k",
                str(root),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
            ]
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, server, "postgres")
        yield f"postgres://postgres@127.0.0.1:{port}/postgres"
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def temporary_redis() -> Iterator[str]:
    """Yield a REDIS_URL for a fresh, non-persistent Redis server."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServiceError("redis-server is not installed: run 'make setup'")
    port = free_port()
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, server, "redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(timeout=30)
