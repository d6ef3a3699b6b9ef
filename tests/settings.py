"""The settings tests run with: webapp.settings in development mode, asked for explicitly
(a plain start is production-shaped). Processes the tests start inherit the choice."""

from __future__ import annotations

import os

os.environ.setdefault("WATTLEASE_ENV", "development")
# Tests settle a lease as soon as it ends, on the readings they stored for it; the demo they
# start waits for its telemetry as production does (tests/webapp/demo/test_demo_server.demo_env).
os.environ.setdefault("TELEMETRY_SETTLE_WAIT_S", "0")
# Each test has a ledger of its own: read the rate card in force from it every time.
os.environ.setdefault("RATE_CARD_REFRESH_S", "0")

from webapp.settings import *  # noqa: F403
