"""The dashboard in a real headless Chromium (Debian's, driven by Playwright): it draws the
charts from plotly.js served locally, connects its websocket and updates while the demo
loop works, with no error in the page."""

from __future__ import annotations

import pytest

from tests.webapp.browser import browser, watch  # noqa: F401  (browser: a fixture)
from tests.webapp.demo.test_demo_server import demo_server  # noqa: F401  (fixture)


@pytest.mark.browser
def test_dashboard_goes_live_and_updates(browser, demo_server, tmp_path):  # noqa: F811
    base, _process, _log = demo_server
    errors: list[str] = []
    page = watch(browser.new_page(), errors)
    page.goto(base + "/")
    page.wait_for_selector("#live.on", timeout=20_000)
    page.wait_for_selector("#chart-util .main-svg", timeout=20_000)
    first = page.evaluate("document.body.dataset.snapshotAt")
    # the demo loop requests a lease within a few ticks; the page must re-read the data
    page.wait_for_function(
        "at => document.body.dataset.snapshotAt !== at", arg=first, timeout=30_000
    )
    page.wait_for_selector("#leases tbody tr", timeout=30_000)
    assert page.locator("#fleet tbody tr").count() >= 4
    # the demo's tampered node (PCR 7 extended after its first quote) turns red live
    page.wait_for_selector("#nodes tr.trust-failed", timeout=60_000)
    assert page.locator("#nodes tr.trust-trusted").count() >= 3
    page.wait_for_selector("#chart-idle .main-svg", timeout=20_000)
    page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
    assert errors == []
