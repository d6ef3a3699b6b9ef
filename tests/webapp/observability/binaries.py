"""The built Prometheus, promtool and Jaeger for tests, and their processes. A missing
binary FAILS the test with the command that builds it (`make test` builds them first); it
never skips."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from chaincode_client.fabric_network.build import BuildSpec
from webapp.observability.binaries import MissingBinary, binary

POLL_S = 0.25
STOP_TIMEOUT_S = 30


def require(spec: BuildSpec, name: str) -> Path:
    try:
        return binary(spec, name)
    except MissingBinary as exc:
        pytest.fail(str(exc))


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def wait_until(what: str, check, process: subprocess.Popen, log: Path, timeout_s: float):  # type: ignore[no-untyped-def]
    """Poll `check()` until it returns something truthy; fail with the process's log."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = check()
        except OSError:
            result = None
        if result:
            return result
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen in {timeout_s}s:\n{log.read_text()[-4000:]}")
        time.sleep(POLL_S)


def stop(process: subprocess.Popen) -> None:
    """SIGTERM, as an operator stops it (its exporters flush); SIGKILL if it hangs."""
    process.terminate()
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
