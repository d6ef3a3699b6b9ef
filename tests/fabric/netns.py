"""Separate hosts on one machine: Linux network namespaces this test process makes itself.

`Hosts` makes one namespace per host, each with its own loopback and one interface (`eth0`)
with a 10.x address, all plugged into a bridge inside a namespace of its own (the switch), so
no address, link or route is added to the machine's own network. Everything it made is
deleted on exit, even after a failure: first every process still inside one of its
namespaces (started by this test), then the namespaces themselves (which removes their links).

A process run with `Hosts.run(host, argv)` and everything it starts live in that host's
namespace. `Forward` lets this test process, which stays in the machine's namespace, reach one
address as seen from inside a host (an application dialling its own organisation's peer):
it listens on 127.0.0.1 and makes each outgoing connection from inside that host's namespace.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

CLONE_NEWNET = 0x40000000
SUBNET = "10.77.0"  # inside the namespaces only: every test run has a switch of its own
FIRST_HOST = 10
PREFIX_LEN = 24
STOP_GRACE_S = 10.0
PUMP_CHUNK = 65536


def available() -> str | None:
    """Why namespaces cannot be made here, or None (needs root: CAP_NET_ADMIN, CAP_SYS_ADMIN)."""
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    return None


def _ip(*argv: str) -> None:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(argv)}: {done.stderr.strip()}")


class Hosts:
    def __init__(self, names: Sequence[str]) -> None:
        tag = f"wl{os.getpid()}x{time.monotonic_ns() % 100000}"
        self.switch = f"{tag}-switch"
        self.namespaces = {name: f"{tag}-{name}" for name in names}
        self.addresses = {name: f"{SUBNET}.{FIRST_HOST + i}" for i, name in enumerate(names)}
        self._made: list[str] = []

    def __enter__(self) -> Hosts:
        try:
            self._make()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def _make(self) -> None:
        _ip("netns", "add", self.switch)
        self._made.append(self.switch)
        _ip("-n", self.switch, "link", "set", "lo", "up")
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, (name, ns) in enumerate(self.namespaces.items()):
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            port = f"port{i}"
            _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                "netns", ns)  # fmt: skip
            _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.addresses[name]}/{PREFIX_LEN}", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")

    def pids(self) -> list[int]:
        pids: list[int] = []
        for ns in self._made:
            done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            pids += [int(p) for p in done.stdout.split()]
        return pids

    def remove(self) -> None:
        """Stop whatever still runs in these namespaces (SIGTERM, then SIGKILL), delete them."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + STOP_GRACE_S
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.1)
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        self._made.clear()

    def exists(self) -> list[str]:
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        mine = [self.switch, *self.namespaces.values()]
        return [ns for ns in mine if ns in listed.split()]

    def run(
        self, host: str, argv: Sequence[str], cwd: Path, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.namespaces[host], *argv],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    def link(self, host: str, up: bool) -> None:
        """Cut (or restore) `host`'s only link: its namespace's eth0 goes down (or up)."""
        _ip("-n", self.namespaces[host], "link", "set", "eth0", "up" if up else "down")


def _enter(namespace: str) -> None:
    """Move the calling thread (only) into `namespace`'s network stack."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {namespace}")
    finally:
        os.close(fd)


class Forward:
    """127.0.0.1:<port> in this namespace -> `target` dialled from inside `namespace`."""

    def __init__(self, namespace: str, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._dials: queue.Queue[socket.socket | None] = queue.Queue()
        self._open: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()
        threading.Thread(target=self._dial, args=(namespace,), daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                break
            self._dials.put(conn)

    def _dial(self, namespace: str) -> None:
        _enter(namespace)  # sockets this thread makes belong to the host's namespace
        while (conn := self._dials.get()) is not None:
            try:
                out = socket.create_connection(self.target, timeout=5)
            except OSError:
                conn.close()  # as if the host did not answer: the client sees a reset
                continue
            out.settimeout(None)
            self._open += [conn, out]
            for a, b in ((conn, out), (out, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(PUMP_CHUNK):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed = True
        self._dials.put(None)
        self._listener.close()
        for s in self._open:
            with contextlib.suppress(OSError):
                s.close()
