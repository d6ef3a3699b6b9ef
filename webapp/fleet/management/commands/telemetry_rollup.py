"""`manage.py telemetry_rollup`: write the pool rollups (webapp/fleet/rollups.py) of every
closed hour not rolled up yet, or with --since-hours N, of the last N hours again. The
dashboards catch up by themselves when read; this is for a bulk import or a backfill."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand

from ledger.units import MS_PER_HOUR
from scheduler.advice import hour_start_ms
from webapp.fleet import rollups


class Command(BaseCommand):
    help = "Roll the per-GPU hourly rollups up into per-pool (site x generation) hours."

    def add_arguments(self, parser):
        parser.add_argument("--since-hours", type=int, default=None, help="redo the last N hours")

    def handle(self, *args, since_hours: int | None = None, **options):
        now_ms = time.time_ns() // 1_000_000
        if since_hours is None:
            written = rollups.catch_up(now_ms)
        else:
            start = hour_start_ms(now_ms) - since_hours * MS_PER_HOUR
            written = rollups.roll_up(start, rollups.closed_before(now_ms))
        self.stdout.write(f"pool hours written: {written}")
