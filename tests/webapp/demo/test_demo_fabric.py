"""The whole demo through a real Fabric network: `manage.py demo --ledger fabric` brings the
network up, swtpm nodes enrol over HTTP, their quotes are re-verified by both organisations'
chaincode servers, leases and settlements are relayed to the channel, the dashboard in
Chromium shows blocks arriving live and the tampered node in red, and a tenant's bill page
shows its settled lines verified by the server's auditor against the channel's roots."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.request

import pytest

from tests.fabric.network_fixture import free_base_port
from tests.webapp.browser import browser, watch  # noqa: F401  (browser: a fixture)
from tests.webapp.console.test_console_browser import _login
from tests.webapp.demo.test_demo_server import (
    start_demo,
    stop_demo,
    wait_for_the_fleet_on_the_ledger,
)

FABRIC_START_TIMEOUT_S = 240
FUNCTIONS_SEEN_WITHIN_MS = 120_000
SETTLED_LINE_WITHIN_S = 180


@pytest.fixture
def fabric_demo(tmp_path):
    base, process, log = start_demo(
        tmp_path,
        "--ledger",
        "fabric",
        "--fabric-base-port",
        str(free_base_port()),
        timeout_s=FABRIC_START_TIMEOUT_S,
    )
    yield base, process, log
    stop_demo(process)


def data(base: str) -> dict:
    with urllib.request.urlopen(base + "/dashboard/data.json", timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.fabric
@pytest.mark.browser
def test_demo_runs_through_fabric_and_the_dashboard_shows_its_blocks(
    browser,  # noqa: F811
    fabric_demo,
    tmp_path,
):
    base, process, log = fabric_demo
    errors: list[str] = []
    page = watch(browser.new_page(), errors)
    page.goto(base + "/")
    page.wait_for_selector("#live.on", timeout=20_000)
    # the relay commits registrations, verdicts and leases on the channel; the dashboard's
    # ledger table fills from the websocket's "ledger" events, block numbers from Fabric
    page.wait_for_function(
        """() => {
            const cells = [...document.querySelectorAll('#ledger-txs tbody tr td')];
            const text = cells.map(c => c.textContent).join(' ');
            return text.includes('RecordAttestation') && text.includes('CreateLease');
        }""",
        timeout=FUNCTIONS_SEEN_WITHIN_MS,
    )
    page.wait_for_selector("#nodes tr.trust-failed", timeout=60_000)
    assert page.locator("#nodes tr.trust-trusted").count() >= 3
    # every node's EK-bound registration was accepted by both organisations' peers
    wait_for_the_fleet_on_the_ledger(tmp_path / "wattlease.sqlite3")
    page.screenshot(path=str(tmp_path / "dashboard-fabric.png"), full_page=True)
    ledger = data(base)["ledger"]
    assert ledger["last_block"] and ledger["last_block"] > 3  # channel config + deploy blocks
    codes = {tx["code"] for tx in ledger["recent"]}
    assert "VALID" in codes, ledger
    assert errors == []

    # the tenant console audits bills on Fabric too: the server's auditor re-derives each
    # settled line from the channel's blocks, against the network's roots (LEDGER_TRUST_ROOTS)
    log.seek(0)
    logins = re.findall(r"tenant console for [^:]+: \S+\s+user (\S+)\s+password (\S+)", log.read())
    problems: list[str] = []
    pages = [_login(browser, base + "/console/login/", u, p, problems) for u, p in logins]
    deadline = time.monotonic() + SETTLED_LINE_WITHIN_S
    shown: list[str] = []
    while "verified" not in shown and time.monotonic() < deadline:
        shown = []
        for tenant_page in pages:
            tenant_page.goto(base + "/console/bills/")
            cells = tenant_page.locator("td.verdict")
            shown += cells.evaluate_all("cells => cells.map(c => c.dataset.verdict)")
        time.sleep(3)
    assert "verified" in shown, shown
    assert set(shown) <= {"verified", "pending"}, shown
    assert problems == []

    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) in (0, -signal.SIGINT, 130)
    log.seek(0)
    output = log.read()
    assert "Traceback" not in output, output[-3000:]
    leftover = subprocess.run(
        ["pgrep", "-f", str(tmp_path / "fabric-network")], capture_output=True, text=True
    )
    assert leftover.stdout == "", f"the demo left Fabric processes behind: {leftover.stdout}"
