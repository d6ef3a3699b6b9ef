"""The production settings plus the web bench's baseline URL (bench/bare_view.py)."""

from __future__ import annotations

from webapp.settings import *  # noqa: F403

ROOT_URLCONF = "bench.bare_view"
