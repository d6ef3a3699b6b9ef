"""The tenant console and the operator dashboards in Debian's Chromium, against the running
demo: a tenant previews, requests, watches its lease go active, downloads the receipt and
finds the settled line in its bill, every line verified by the server's auditor; another
tenant sees none of it; the operator's pages draw their plots with data, take a new telemetry
sample without a reload, and show the tampered node's differing PCR. No page logs an error
or fails a request.

Screenshots go to $WATTLEASE_SCREENSHOTS when set (`make screenshots` refreshes
docs/screenshots/ this way), else to the test's temporary directory."""

from __future__ import annotations

import json
import os
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from ledger import money
from ledger.audit.receipt import verify_receipt
from tests.ledger.helpers import org_roots
from tests.webapp import accessibility
from tests.webapp.browser import browser, watch  # noqa: F401  (browser: a fixture)
from tests.webapp.demo.test_demo_server import DEMO_SETTLE_WAIT_S, start_demo, stop_demo

pytestmark = pytest.mark.browser

WAIT_MS = 60_000
PREVIEW_PAIR_TRIES = 5  # form and API previews a moment apart, each of the live fleet
# a line appears once quotes attest the lease's readings past its end; on the tampered node
# (placed there while its first quote was good) none will, and it is billed after the wait
BILL_WAIT_MS = (DEMO_SETTLE_WAIT_S + 30) * 1000
OPS_PAGES = {
    "fleet": ("#chart-fleet-generations", "#chart-fleet-sites"),
    "utilisation": ("#chart-generation", "#chart-site"),
    "cost": ("#chart-cost-tenant", "#chart-cost-generation"),
    "capacity": ("#chart-heatmap",),
    "ledger": ("#chart-throughput", "#chart-latency", "#chart-depth", "#chart-codes"),
}

# the fleet page's way down: (level reached, the link followed, a chart that level draws)
DRILL_DOWN = (
    ("site", "#sites tbody a", "#chart-site-pools"),
    ("pool", "#pools tbody a", "#chart-node-util"),
    ("node", "#pool-nodes tbody a", "#chart-gpu-util"),
    ("gpu", "#gpus tbody a", "#chart-gpu-lines"),
)


# how many non-empty values the traces of a Plotly chart hold
DRAWN_POINTS = """selector => document.querySelector(selector).data.reduce(
    (n, t) => n + (t.z ? t.z.flat() : t.y).filter(v => v !== null).length, 0)"""


class Demo:
    def __init__(self, base: str, log_text: str, shots: Path, data_dir: Path) -> None:
        self.base, self.shots, self.data_dir = base, shots, data_dir
        self.logins = dict(
            re.findall(r"tenant console for [^:]+: \S+\s+user (\S+)\s+password (\S+)", log_text)
        )
        self.keys = re.findall(r"tenant API key for [^:]+: (\S+)", log_text)  # same order
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
    page.wait_for_url(lambda url: "/login/" not in url)  # the POST answered with a redirect
    return page


def _micro(page: Page, selector: str) -> int:
    return int(page.locator(selector).get_attribute("data-micro"))


def _api(demo: Demo, path: str, body: dict | None = None) -> dict:
    """The first tenant's API (its key from the demo's log), as a client calls it."""
    request = urllib.request.Request(
        demo.base + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {demo.keys[0]}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _ledger_terms(receipt: dict) -> dict:
    """The lease terms the CreateLease transaction in a lease's receipt recorded."""
    for tx in receipt["transactions"]:
        proposal = json.loads(json.loads(tx["envelope"])["proposal"])
        if proposal["fn"] == "CreateLease":
            return json.loads(proposal["args"][0])["terms"]
    raise AssertionError("no CreateLease in the receipt")


def _month(page: Page, link: str) -> str:
    return page.locator(f"section.bill:has({link})").get_attribute("data-month")


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
    # the form's quote is the API's, to the micro-unit. Both price the live fleet, and a new
    # reading between them moves the temperature derating: try until one pair sees the same
    # readings (a price computed differently never matches)
    request = {"gpu_count": 1, "precision": "FP16", "hours": "0.2", "priority": 5}
    for _ in range(PREVIEW_PAIR_TRIES):
        shown = _micro(page, "#preview-total")
        preview = _api(demo, "/api/v1/price-preview/", request)
        if preview["quote_micro"] == shown:
            break
        page.click("#preview")
        page.wait_for_timeout(1000)
    assert preview["quote_micro"] == shown, (preview, shown)
    assert _micro(page, "#preview-capacity") + _micro(page, "#preview-energy") == shown
    page.screenshot(path=str(demo.shots / "console-request.png"), full_page=True)
    page.click("#submit-request")
    page.wait_for_url(re.compile(r"/console/leases/\d+/$"))
    lease_url = page.url
    # the lease goes active on the page itself (console.js), without a reload
    page.wait_for_function(
        "document.getElementById('state').dataset.state === 'active'", timeout=WAIT_MS
    )
    page.wait_for_selector("#end", timeout=WAIT_MS)  # the page followed: an active lease ends
    assert "GPU-" in page.locator("table[data-lease]").inner_text()
    page.screenshot(path=str(demo.shots / "console-lease.png"), full_page=True)
    with page.expect_download() as download:
        page.click("#receipt")
    receipt = tmp_path / "receipt.json"
    download.value.save_as(receipt)
    # checked against each organisation's CA, as an auditor gets them (not from the receipt)
    roots = org_roots(demo.data_dir / "ledger.sqlite3")
    assert verify_receipt(json.loads(receipt.read_text()), roots) == []
    # the lease page's and the API's quote are the quote of the terms the ledger recorded
    terms = _ledger_terms(json.loads(receipt.read_text()))
    recorded = money.Terms.of(terms).quote()
    assert _micro(page, "#lease-quote") == _micro(page, "#lease-quote-total") == recorded
    lease_id = int(lease_url.rstrip("/").rsplit("/", 1)[1])
    assert _api(demo, f"/api/v1/leases/{lease_id}/")["price_total_micro"] == recorded
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
    # the bill page's figures are the ledger terms' line of the interval, to the micro-unit
    row = page.locator(f"tr:has({link})")
    line = _api(demo, f"/api/v1/bills/?month={_month(page, link)}")["lines"]
    (mine,) = [x for x in line if x["lease_pk"] == lease_id]
    expected = money.interval_line(
        money.Terms.of(terms),
        mine["interval"]["start_ms"],
        mine["interval"]["end_ms"],
        mine["measured_energy_mj"],
    )
    for cell, figure in (
        ("td.capacity", expected.capacity_micro),
        ("td.measured", expected.measured_energy_micro),
        ("td.total", expected.total_micro),
        ("td.settlement", expected.settlement_micro),
        ("span.priced", expected.priced_energy_micro),
    ):
        assert int(row.locator(cell).get_attribute("data-micro")) == figure, cell
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


# each language as a browser asks for it (Accept-Language) and the viewer's time zone
VIEWERS = {"en": ("en-GB", "Europe/Berlin"), "zh": ("zh-CN", "Asia/Shanghai")}
WIDTHS = {"desktop": accessibility.DESKTOP, "phone": accessibility.PHONE}
HEADINGS = {"en": "Leases of", "zh": "的租约"}


def _viewer(chromium: Browser, language: str, width: str, problems: list[str]) -> Page:
    locale, zone = VIEWERS[language]
    context = chromium.new_context(locale=locale, timezone_id=zone, viewport=WIDTHS[width])
    return watch(context.new_page(), problems)


def _check(page: Page, where: str, failures: list[str]) -> None:
    found = accessibility.violations(page)
    failures.extend(f"{where}: {v}" for v in found)
    if accessibility.overflows(page):
        failures.append(f"{where}: wider than the window")


def test_every_page_in_both_languages_at_both_widths_is_accessible(browser, demo):  # noqa: F811
    """axe-core (WCAG 2.1 AA and best practices): no serious or critical violation on any
    console or operator page, in English and Chinese, on a desktop and a 390 px phone; the
    page reads in the browser's language, and the switch and the forms work by keyboard."""
    problems: list[str] = []
    failures: list[str] = []
    (user, password) = next(iter(demo.logins.items()))
    operator, operator_password = demo.operator
    for language in VIEWERS:
        for width in WIDTHS:
            where = f"{language}/{width}"
            page = _viewer(browser, language, width, problems)
            page.goto(demo.base + "/console/login/")
            _check(page, f"{where} login", failures)
            page.fill("#id_username", user)
            page.fill("#id_password", password)
            page.press("#id_password", "Enter")  # the keyboard logs in
            page.wait_for_selector("#leases")
            assert HEADINGS[language] in page.locator("h1").inner_text(), where
            _check(page, f"{where} leases", failures)
            lease = page.locator("#leases a[href*='/console/leases/']").first.get_attribute("href")
            page.goto(demo.base + "/console/leases/new/")
            page.fill("#f-hours", "")
            page.focus("#f-hours")
            page.keyboard.type("0.1")
            for _ in range(12):  # by keyboard alone to the preview button
                if page.evaluate("document.activeElement.id") == "preview":
                    break
                page.keyboard.press("Tab")
            page.keyboard.press("Enter")
            page.wait_for_selector("#price-preview")
            _check(page, f"{where} request", failures)
            if (language, width) == ("en", "phone"):
                page.screenshot(path=str(demo.shots / "console-request-phone.png"), full_page=True)
            for name, path in (
                ("lease", lease),
                ("bills", "/console/bills/"),
                ("gpus", "/console/gpus/"),
            ):
                page.goto(demo.base + path)
                _check(page, f"{where} {name}", failures)
                if (language, width, name) == ("zh", "desktop", "lease"):
                    assert "报价" in page.locator("main").inner_text()
                    assert " CST" in page.locator("#story").inner_text()  # Asia/Shanghai
                    page.screenshot(path=str(demo.shots / "console-lease-zh.png"), full_page=True)
            page.context.close()

            ops = _viewer(browser, language, width, problems)
            ops.goto(demo.base + "/admin/login/?next=/")
            ops.fill("#id_username", operator)
            ops.fill("#id_password", operator_password)
            ops.press("#id_password", "Enter")
            ops.wait_for_selector("#chart-idle .main-svg", timeout=WAIT_MS)
            _check(ops, f"{where} overview", failures)
            node = ops.locator("#nodes tbody td").first.inner_text()
            for name, charts in OPS_PAGES.items():
                ops.goto(f"{demo.base}/ops/{name}/?range=1h")
                ops.wait_for_selector(f"{charts[0]} .main-svg", timeout=WAIT_MS)
                _check(ops, f"{where} ops/{name}", failures)
            ops.goto(f"{demo.base}/ops/nodes/{node}/?range=1h")
            ops.wait_for_selector("#chart-attestation .main-svg", timeout=WAIT_MS)
            _check(ops, f"{where} ops/node", failures)
            # down from the fleet by its links: a site, one of its pools, a node's GPU
            ops.goto(f"{demo.base}/ops/fleet/")
            for level, link, chart in DRILL_DOWN:
                ops.locator(link).first.click()
                ops.wait_for_selector(f"{chart} .main-svg", timeout=WAIT_MS)
                _check(ops, f"{where} ops/{level}", failures)
            ops.context.close()
    # the switch on every page: to Chinese and back, by keyboard
    page = _viewer(browser, "en", "desktop", problems)
    page.goto(demo.base + "/console/login/")
    page.select_option("#language-select", "zh-hans")
    page.focus("#language-go")
    page.keyboard.press("Enter")
    # the form posts and is redirected back to this same URL: wait for the page it answers
    # (wait_for_load_state could return for the page already loaded, before the POST started)
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    assert "租户控制台" in page.locator("h1").inner_text()
    page.select_option("#language-select", "en")
    page.click("#language-go")
    expect(page.locator("h1")).to_have_text("Tenant console")
    assert failures == []
    assert problems == []
