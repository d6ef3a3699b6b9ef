"""Start, find and stop the network's processes: one pid file and one log file per node.

Each process runs in a session of its own, so stopping it stops whatever it started. A pid
file counts only while that pid is alive and still runs the program it was written for, so a
stale file left by a crash (or a reused pid) is never mistaken for a running node.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from chaincode_client.fabric_network.layout import HOST, Layout, NetworkError

STOP_GRACE_S = 10.0
POLL_S = 0.1


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def running_pid(layout: Layout, name: str) -> int | None:
    """The pid of process `name` if it is alive and is the program its pid file names."""
    try:
        pid_text, _, program = layout.pid_file(name).read_text().partition("\n")
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    cmdline = _cmdline(pid)
    if not cmdline or program.strip() not in cmdline or not alive(pid):
        return None
    return pid


def alive(pid: int) -> bool:
    """The process exists and has not exited (a zombie, not yet reaped, has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def start(layout: Layout, name: str, argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> int:
    """Start `argv` as process `name`, its output appended to its log; returns the pid."""
    log_path = layout.log_file(name)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    layout.pid_file(name).parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        log.write(f"\n--- {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} start\n".encode())
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    layout.pid_file(name).write_text(f"{proc.pid}\n{argv[0]}\n")
    return proc.pid


def stop(layout: Layout, name: str, sig: int = signal.SIGTERM) -> bool:
    """Stop process `name` (SIGTERM, then SIGKILL after a grace period); True if it ran."""
    pid = running_pid(layout, name)
    if pid is None:
        layout.pid_file(name).unlink(missing_ok=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
    deadline = time.monotonic() + STOP_GRACE_S
    while running_pid(layout, name) is not None and time.monotonic() < deadline:
        time.sleep(POLL_S)
    if running_pid(layout, name) is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        while running_pid(layout, name) is not None:
            time.sleep(POLL_S)
    layout.pid_file(name).unlink(missing_ok=True)
    return True


def port_open(port: int, host: str = HOST) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def wait_port(
    layout: Layout, name: str, pid: int, port: int, timeout_s: float, host: str = HOST
) -> None:
    """Wait until process `name` (`pid`) accepts connections on `host:port`, or say why not."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if port_open(port, host):
            return
        if not alive(pid):
            raise NetworkError(f"{name} exited during start-up; {tail(layout, name)}")
        time.sleep(POLL_S)
    raise NetworkError(f"{name} did not open port {port} in {timeout_s:.0f}s; {tail(layout, name)}")


def wait_ports_closed(
    endpoints: Sequence[tuple[str, int]], timeout_s: float = STOP_GRACE_S
) -> list[tuple[str, int]]:
    """(address, port) pairs still accepting connections after `timeout_s` (empty when all
    are closed)."""
    deadline = time.monotonic() + timeout_s
    busy = [e for e in endpoints if port_open(e[1], e[0])]
    while busy and time.monotonic() < deadline:
        time.sleep(POLL_S)
        busy = [e for e in busy if port_open(e[1], e[0])]
    return busy


def tail(layout: Layout, name: str, lines: int = 15) -> str:
    try:
        text = layout.log_file(name).read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return f"no log at {layout.log_file(name)}"
    return f"last lines of {layout.log_file(name)}:\n" + "\n".join(text)


def run(argv: Sequence[str], env: Mapping[str, str], what: str, timeout_s: float = 120) -> str:
    """Run a Fabric CLI command to completion; its output, or NetworkError naming `what`."""
    try:
        out = subprocess.run(
            list(argv),
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise NetworkError(f"{what}: no answer in {timeout_s:.0f}s ({argv[0]})") from exc
    if out.returncode != 0:
        lines = (out.stderr + out.stdout).strip().splitlines()
        errors = [line for line in lines if "Error" in line or "error" in line]
        text = (errors or lines)[-12:]  # Fabric's CLIs print usage after the error line
        raise NetworkError(f"{what} failed (exit {out.returncode}):\n" + "\n".join(text))
    return out.stdout + out.stderr
