"""Debian's headless Chromium driven by Playwright, for the page tests: the `browser`
fixture (import it into a test module to use it) and `watch`, which collects every problem a
page shows: uncaught errors, console errors, failed requests and error answers."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
# Without these, Chromium tries to reach Google's services, which this network refuses.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run 'make setup' (apt-get install chromium)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def watch(page: Page, problems: list[str], allowed_status: tuple[int, ...] = ()) -> Page:
    """Append to `problems` whatever goes wrong on `page` from now on."""
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on(
        "console", lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None
    )
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url} {r.failure}"))
    page.on(
        "response",
        lambda r: problems.append(f"{r.status} {r.url}")
        if r.status >= 400 and r.status not in allowed_status
        else None,
    )
    return page
