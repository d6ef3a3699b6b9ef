"""axe-core in the browser tests: inject the pinned axe-core (tests/webapp/axe/package.json,
installed by `make setup`) into a Playwright page and list its serious and critical
violations, each with the rule, what it asks and where."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page

AXE_JS = Path(__file__).parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING = ("serious", "critical")
# WCAG 2.1 A and AA, and axe's best practices
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


def violations(page: Page) -> list[str]:
    """The serious and critical axe-core violations on the page as it is now."""
    if not AXE_JS.exists():
        pytest.fail(f"{AXE_JS} is missing: run 'make setup' (npm ci in tests/webapp/axe)")
    page.add_script_tag(path=str(AXE_JS))
    found = page.evaluate(
        "tags => axe.run(document, {runOnly: {type: 'tag', values: tags}})"
        ".then(r => r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
        " where: v.nodes.slice(0, 3).map(n => n.target.join(' '))})))",
        TAGS,
    )
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {v['where']}"
        for v in found
        if v["impact"] in BLOCKING
    ]


def overflows(page: Page) -> bool:
    """Whether the page is wider than the window (a phone would scroll sideways); tables
    scroll inside their own region instead."""
    return page.evaluate("document.documentElement.scrollWidth > window.innerWidth + 1")
