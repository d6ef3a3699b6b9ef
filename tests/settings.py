"""The settings tests run with: webapp.settings in development mode, asked for explicitly
(a plain start is production-shaped). Processes the tests start inherit the choice."""

from __future__ import annotations

import os

os.environ.setdefault("WATTLEASE_ENV", "development")

from webapp.settings import *  # noqa: F403
