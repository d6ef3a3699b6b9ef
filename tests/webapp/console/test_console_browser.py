"""The tenant console and the operator dashboards in Debian's Chromium, against the running
demo: a tenant previews, requests, watches its lease go active, downloads the receipt and
finds the settled line in its bill, every line verified by the server's auditor; another
tenant sees none of it; the operator's pages draw their plots with data, take a new telemetry
sample without a reload, and show the tampered node's differing PCR. No page logs an error
or fails a request.

Screenshots go to $WATTLEASE_SCREENSHOTS when set (`make screenshots` refreshes
docs/screenshots/ this way), else to the test's temporary directory."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from ledger.audit.receipt import verify_receipt
from tests.ledger.helpers import org_roots
from tests.webapp.browser import browser, watch  # noqa: F401  (browser: a fixture)
from tests.webapp.demo.test_demo_server import DEMO_SETTLE_WAIT_S, start_demo, stop_demo

pytestmark = pytest.mark.browser

WAIT_MS = 60_000
# a line appears once quotes attest the lease's readings past its end; on the tampered node
# (placed there while its first quote was good) none will, and it is billed after the wait
BILL_WAIT_MS = (DEMO_SETTLE_WAIT_S + 30) * 1000
OPS_PAGES = {
    "utilisation": ("#chart-generation", "#chart-gpu-util", "#chart-gpu-mem"),
    "cost": ("#chart-cost-tenant", "#chart-cost-generation"),
    "capacity": ("#chart-heatmap",),
    "ledger": ("#chart-throughput", "#chart-latency", "#chart-depth", "#chart-codes"),
}


# how many non-empty values the traces of a Plotly chart hold
DRAWN_POINTS = """selector => document.querySelector(selector).data.reduce(
    (n, t) => n + (t.z ? t.z.flat() : t.y).filter(v => v !== null).length, 0)"""


class Demo:
    def __init__(self, base: str, log_text: str, shots: Path, data_dir: Path) -> None:
        self.base, self.shots, self.data_dir = base, shots, data_dir
        self.logins = dict(
            re.findall(r"tenant console for [^:]+: \S+\s+user (\S+)\s+password (\S+)", log_text)
        )
        self.operator = re.search(
            r"operator console: \S+\s+user (\S+)\s+password (\S+)", log_text
        ).groups()


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Iterator[Demo]:
    directory = tmp_path_factory.mktemp("demo")
    base, process, log = start_demo(directory)
    log.seek(0)
    shots = Path(os.environ.get("WATTLEASE_SCREENSHOTS") or directory / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    yield Demo(base, log.read(), shots, directory)
    stop_demo(process)


def _login(
    chromium: Browser, url: str, user: str, password: str, problems: list[str], **watching
) -> Page:
    page = watch(chromium.new_context(accept_downloads=True).new_page(), problems, **watching)
    page.goto(url)
    page.fill("#id_username", user)
    page.fill("#id_password", password)
    page.locator("[type=submit]").first.click()
    page.wait_for_load_state()
    return page


def test_tenant_previews_requests_watches_downloads_and_reads_its_bill(browser, demo, tmp_path):  # noqa: F811
    problems: list[str] = []
    (user, password), (other_user, other_password) = list(demo.logins.items())[:2]
    page = _login(browser, demo.base + "/console/login/", user, password, problems)
    assert page.locator("#leases").is_visible()
    page.goto(demo.base + "/console/leases/new/")
    page.fill("[name=gpu_count]", "1")
    page.select_option("[name=precision]", "FP16")
    page.fill("[name=hours]", "0.2")
    page.fill("[name=priority]", "5")  # the first tenant, Aurora Labs, is granted 5 (seed)
    # right after the demo starts its nodes are still enrolling: the preview says why it
    # would wait until one has a good quote on the ledger
    for _ in range(WAIT_MS // 2000):
        page.click("#preview")
        page.wait_for_selector("#price-preview")
        if page.locator("#preview-generation").count():
            break
        assert "It would wait" in page.locator("#preview-wait").inner_text()
        page.wait_for_timeout(2000)
    assert page.locator("#preview-generation").inner_text()
    assert "Planned GPU-hours" in page.locator("#price-preview").inner_text()
    page.screenshot(path=str(demo.shots / "console-request.png"), full_page=True)
    page.click("#submit-request")
    page.wait_for_url(re.compile(r"/console/leases/\d+/$"))
    lease_url = page.url
    # the lease goes active on the page itself (console.js), without a reload
    page.wait_for_function(
        "document.getElementById('state').textContent === 'active'", timeout=WAIT_MS
    )
    page.wait_for_selector("#end", timeout=WAIT_MS)  # the page followed: an active lease ends
    assert "GPU-" in page.locator("table[data-lease]").inner_text()
    page.screenshot(path=str(demo.shots / "console-lease.png"), full_page=True)
    with page.expect_download() as download:
        page.click("#receipt")
    receipt = tmp_path / "receipt.json"
    download.value.save_as(receipt)
    import json

    # checked against each organisation's CA, as an auditor gets them (not from the receipt)
    roots = org_roots(demo.data_dir / "ledger.sqlite3")
    assert verify_receipt(json.loads(receipt.read_text()), roots) == []
    lease_path = lease_url.removeprefix(demo.base)
    # 0.2 leased hours last 6 s of the demo's clock; then it is settled onto the ledger
    # ... and its line is re-derived by the server's auditor (ledger.audit.bill) from the
    # receipt and the readings: every line of the bill shows the verdict "verified"
    page.goto(demo.base + "/console/bills/")
    link = f'a[href="{lease_path}"]'
    for _ in range(BILL_WAIT_MS // 2000):
        row = page.locator(f"tr:has({link})")
        shown = page.locator("td.verdict").all_inner_texts()
        if row.count() and "pending" not in " ".join(shown):
            break
        page.wait_for_timeout(2000)
        page.reload()
    assert page.locator(f"tr:has({link})").count() == 1
    verdict = page.locator(f"tr:has({link}) td.verdict")
    assert verdict.get_attribute("data-verdict") == "verified", verdict.inner_text()
    shown = page.locator("td.verdict").evaluate_all("cells => cells.map(c => c.dataset.verdict)")
    assert shown and set(shown) == {"verified"}, page.locator("td.verdict").all_inner_texts()
    assert "wattlease ledger audit-bill" in page.locator("#audit-command").inner_text()
    page.screenshot(path=str(demo.shots / "console-bills.png"), full_page=True)
    page.goto(demo.base + "/console/")
    page.screenshot(path=str(demo.shots / "console-leases.png"), full_page=True)
    page.goto(demo.base + "/console/gpus/")
    assert problems == []

    # another tenant sees none of it
    outsider_problems: list[str] = []
    other = _login(
        browser,
        demo.base + "/console/login/",
        other_user,
        other_password,
        outsider_problems,
        allowed_status=(404,),
    )
    assert other.goto(lease_url).status == 404
    other.goto(demo.base + "/console/bills/")
    assert other.locator(link).count() == 0
    other.goto(demo.base + "/console/")
    assert other.locator(f'a[href="{lease_path}"]').count() == 0
    assert [p for p in outsider_problems if "404" not in p] == []


def test_operator_pages_draw_data_go_live_and_show_the_tampered_pcr(browser, demo):  # noqa: F811
    problems: list[str] = []
    user, password = demo.operator
    page = _login(
        browser, demo.base + "/admin/login/?next=/ops/utilisation/", user, password, problems
    )
    for name, charts in OPS_PAGES.items():
        page.goto(
            f"{demo.base}/ops/{name}/?range=7d"
            if name != "ledger"
            else f"{demo.base}/ops/{name}/?range=1h"
        )
        for chart in charts:
            page.wait_for_selector(f"{chart} .main-svg", timeout=WAIT_MS)
        page.wait_for_selector("#live.on", timeout=WAIT_MS)
        if name in ("utilisation", "capacity"):  # a week of history is drawn
            points = page.evaluate(DRAWN_POINTS, charts[0])
            assert points > 0, name
        page.screenshot(path=str(demo.shots / f"ops-{name}.png"), full_page=True)
    # a new telemetry sample reaches the open page without a reload
    page.goto(demo.base + "/ops/utilisation/?range=1h")
    page.wait_for_selector("#live.on", timeout=WAIT_MS)
    page.evaluate("window.__marker = 'same page'")
    page.wait_for_function("Number(document.body.dataset.livePoints || 0) >= 2", timeout=WAIT_MS)
    assert page.evaluate("window.__marker") == "same page"
    first = page.evaluate("Number(document.body.dataset.liveSampleT)")
    page.wait_for_function(
        "t => Number(document.body.dataset.liveSampleT) > t", arg=first, timeout=WAIT_MS
    )
    # the tampered node turns failed; its page names the PCR that differs
    page.goto(demo.base + "/")
    page.wait_for_selector("#nodes tr.trust-failed", timeout=WAIT_MS)
    tampered = page.locator("#nodes tr.trust-failed td").first.inner_text()
    page.goto(f"{demo.base}/ops/nodes/{tampered}/?range=1h")
    page.wait_for_selector("#chart-attestation .main-svg", timeout=WAIT_MS)
    page.wait_for_selector("#failed tbody tr", timeout=WAIT_MS)
    assert "sha256 PCR 7: expected" in page.locator("#failed tbody").inner_text()
    page.screenshot(path=str(demo.shots / "ops-node-tampered.png"), full_page=True)
    page.goto(demo.base + "/")
    page.wait_for_selector("#chart-idle .main-svg", timeout=WAIT_MS)
    page.screenshot(path=str(demo.shots / "overview.png"), full_page=True)
    assert problems == []
