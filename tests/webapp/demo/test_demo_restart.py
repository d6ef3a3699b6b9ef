"""The demo comes back after any stop (issue 21): SIGTERM, SIGHUP or SIGKILL to its whole
process group (which reaches its swtpms: a power loss for their TPMs), or one swtpm crashing. On the
next start every node attests again, leases are placed and billed, and the console says a
node is recovering after a power loss. Real demo processes, real swtpms."""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.services import free_port
from tests.webapp.demo.test_demo_server import ROOT, demo_env, get

START_TIMEOUT_S = 120
ATTESTATION_INTERVAL_S = 10  # webapp.demo's DEMO_ATTESTATION_INTERVAL_S
FIRST_RUN_S = 90  # the first run enrols the fleet on the ledger and attests once
# after a restart: the server is up, then two attestation intervals (plus a round's work on
# a shared 2-core machine) for every node to attest again
AGAIN_S = 2 * ATTESTATION_INTERVAL_S + 20
BILLED_S = 150  # a lease placed after the restart ends and is settled (DEMO_SETTLE_WAIT_S)


def _start(directory: Path) -> tuple[str, subprocess.Popen, float]:
    """`manage.py demo` in a process group of its own, as a service manager runs it."""
    port = free_port()
    log = (directory / "demo.log").open("a")
    process = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--port", str(port)],
        cwd=ROOT,
        env=demo_env(directory),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            get(base + "/admin/login/")
            return base, process, time.time()
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                _kill_group(process)
                pytest.fail(f"demo did not start:\n{(directory / 'demo.log').read_text()}")
            time.sleep(0.5)


def _kill_group(process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    with suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the swtpms of the group go too
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)


def _iso(t: float) -> str:
    """As Django stores a datetime in SQLite, to the microsecond: a row written earlier in
    the same second is not "since"."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _attested_since(database: Path, since: float) -> set[str]:
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "select distinct n.name from attestation_attestation a join fleet_node n "
            "on n.id = a.node_id where a.valid and a.created >= ?",
            (_iso(since),),
        ).fetchall()
    return {name for (name,) in rows}


def _done_since(database: Path, function: str, since: float) -> int:
    with sqlite3.connect(database) as db:
        return db.execute(
            "select count(*) from outbox_outboxentry where function = ? and status = 'done' "
            "and created >= ?",
            (function, _iso(since)),
        ).fetchone()[0]


def _nodes(database: Path) -> set[str]:
    with sqlite3.connect(database) as db:
        return {name for (name,) in db.execute("select name from fleet_node")}


def _wait(what: str, check, timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(1)
    pytest.fail(f"{what} within {timeout_s:.0f} s; demo log:\n{log.read_text()[-6000:]}")


def _every_node_attested(database: Path, since: float, log: Path, timeout_s: float) -> None:
    _wait(
        "not every node attested again",
        lambda: _attested_since(database, since) >= _nodes(database),
        timeout_s,
        log,
    )


@pytest.mark.swtpm
def test_the_demo_comes_back_after_any_stop_of_its_process_group(tmp_path) -> None:
    """SIGTERM (a service manager), SIGHUP (a closed terminal), SIGKILL: each stop reaches
    the swtpms too. After each restart every node attests again within two attestation
    intervals and a lease is placed; after the last, a lease is billed."""
    database, log = tmp_path / "wattlease.sqlite3", tmp_path / "demo.log"
    _, process, started = _start(tmp_path)
    try:
        _every_node_attested(database, started, log, FIRST_RUN_S)
    finally:
        _kill_group(process, signal.SIGTERM)
    for sig in (signal.SIGHUP, signal.SIGKILL, None):
        _, process, restarted = _start(tmp_path)
        try:
            _every_node_attested(database, restarted, log, AGAIN_S)
            _wait(
                "no lease placed after the restart",
                lambda t=restarted: _done_since(database, "CreateLease", t) > 0,
                AGAIN_S,
                log,
            )
            if sig is None:
                _wait(
                    "no lease billed after the restart",
                    lambda t=restarted: _done_since(database, "Settle", t) > 0,
                    BILLED_S,
                    log,
                )
        finally:
            _kill_group(process, sig or signal.SIGTERM)
    output = log.read_text()
    assert "clock_not_safe: TPM clock" not in output and "DA lockout" not in output
    # after SIGKILL no TPM2_Shutdown reached the swtpms: their TPMs lost power
    assert "recovering after power loss" in output
    with sqlite3.connect(database) as db:
        rebooted = {
            name
            for (name,) in db.execute(
                "select n.name from attestation_nodeevent e join fleet_node n on n.id = e.node_id"
                " where e.code in ('tpm_power_loss', 'tpm_rebooted')"
            )
        }
        rejected = db.execute(
            "select function, last_error from outbox_outboxentry where status = 'rejected'"
        ).fetchall()
    assert rejected == []
    assert rebooted == _nodes(database)  # each node's page shows its TPM's restarts


CRASHED = "h100-fra-01"  # a node that passes its policy
# one attestation interval, plus the agent's first backoff step and a round's work on a
# shared 2-core machine
BACK_WITHIN_S = ATTESTATION_INTERVAL_S + 10


@pytest.mark.swtpm
def test_a_crashed_swtpm_is_started_again_and_its_node_attests_with_the_event_shown(tmp_path):
    database, log = tmp_path / "wattlease.sqlite3", tmp_path / "demo.log"
    base, process, started = _start(tmp_path)
    try:
        _every_node_attested(database, started, log, FIRST_RUN_S)
        _wait(
            "no lease billed",
            lambda: _done_since(database, "Settle", started) > 0,
            BILLED_S,
            log,
        )
        state = tmp_path / "tpm" / CRASHED
        pid = _swtpm_pid(state)
        os.kill(pid, signal.SIGKILL)  # its TPM loses power mid-run
        crashed = time.monotonic()
        # a quote made just before the kill may be recorded just after it: only a quote
        # recorded after the new swtpm started shows the node came back
        _wait(
            f"no swtpm started again for {CRASHED}",
            lambda: _swtpm_pids(state) - {pid},
            BACK_WITHIN_S,
            log,
        )
        restarted = _started_at(_swtpm_pid(state))
        _wait(
            f"{CRASHED} did not attest again",
            lambda: CRASHED in _attested_since(database, restarted),
            BACK_WITHIN_S - (time.monotonic() - crashed),
            log,
        )
        page = _node_page(base, log, CRASHED)
        assert "tpm_power_loss" in page or "tpm_rebooted" in page, page
        time.sleep(ATTESTATION_INTERVAL_S)  # leases go on being settled
    finally:
        _kill_group(process, signal.SIGTERM)
    assert "swtpm of h100-fra-01 stopped (a power loss)" in log.read_text()
    assert "recovering after power loss" in log.read_text()
    _every_billed_reading_was_attested(database)


def _swtpm_pids(state: Path) -> set[int]:
    found = subprocess.run(
        ["pgrep", "-f", f"swtpm socket .*dir={state} "], capture_output=True, text=True
    ).stdout.split()
    return {int(pid) for pid in found}


def _started_at(pid: int) -> float:
    """When process `pid` started (seconds since the epoch, to a clock tick): /proc gives its
    start and the time now, both since boot."""
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    up_s = float(Path("/proc/uptime").read_text().split()[0])
    return time.time() - (up_s - ticks / os.sysconf("SC_CLK_TCK"))


def _swtpm_pid(state: Path) -> int:
    found = _swtpm_pids(state)
    assert len(found) == 1, found
    return found.pop()


def _node_page(base: str, log: Path, node: str) -> str:
    """The node's operator page, logged in as the demo's operator (its password is in the
    first start's output)."""
    password = re.search(r"user operator  password (\S+)", log.read_text()).group(1)
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    form = opener.open(base + "/admin/login/", timeout=10).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    data = urllib.parse.urlencode(
        {"username": "operator", "password": password, "csrfmiddlewaretoken": token, "next": "/"}
    ).encode()
    opener.open(urllib.request.Request(base + "/admin/login/", data=data), timeout=10).read()
    return opener.open(f"{base}/ops/nodes/{node}/", timeout=10).read().decode()


def _every_billed_reading_was_attested(database: Path) -> None:
    """Each batch of readings a bill line cites was bound by a quote its TPM made and the
    verifier found valid: none of the crashed node's readings is billed unattested."""
    with sqlite3.connect(database) as db:
        attested = {
            (gpu, digest)
            for gpu, digest in db.execute(
                "select g.uuid, b.digest from attestation_telemetrybatch b join "
                "attestation_attestation a on a.id = b.attestation_id join fleet_gpu g "
                "on g.id = b.gpu_id where a.valid"
            )
        }
        lines = [
            json.loads(args)
            for (args,) in db.execute(
                "select args from outbox_outboxentry where function = 'Settle' and status = 'done'"
            )
        ]
        rejected = db.execute(
            "select function, last_error from outbox_outboxentry where status = 'rejected'"
        ).fetchall()
    cited = {(b["gpu"], b["digest"]) for line in lines for b in line["telemetry_batches"]}
    assert lines and cited and cited <= attested
    assert rejected == []
