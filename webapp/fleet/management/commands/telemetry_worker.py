"""`manage.py telemetry_worker`: read GPU telemetry (NVML on a GPU host, else a replayed
trace) and store it for pricing, settlement and the dashboards. Says in one line which
source it uses and, after a fallback, why."""

from __future__ import annotations

import signal
import threading
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scheduler.telemetry.sample import TelemetryError
from scheduler.telemetry.source import open_telemetry
from webapp.fleet.telemetry import record_samples

FLUSH_S = 2.0


class Command(BaseCommand):
    help = "Store GPU telemetry from NVML (or a replayed trace when there is no GPU)."

    def add_arguments(self, parser):
        parser.add_argument("--trace", help="CSV trace to replay when NVML is unavailable")
        parser.add_argument("--speed", type=float, default=1.0, help="replay speed (x real time)")
        parser.add_argument("--interval", type=float, default=5.0, help="NVML read interval, s")
        parser.add_argument("--max-samples", type=int, default=0, help="stop after N (0: never)")

    def handle(self, *args, trace, speed, interval, max_samples, **options):
        try:
            source = open_telemetry(settings.TELEMETRY_SOURCE, trace, speed, interval)
        except TelemetryError as exc:
            raise CommandError(f"{exc} (set --trace FILE, or run on a host with NVML)") from None
        self.stdout.write(source.note)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        batch, flushed, total, unknown = [], time.monotonic(), 0, set()

        def flush() -> None:
            new = record_samples(batch).unknown_gpus - unknown
            if new:
                self.stderr.write(f"ignoring GPUs the fleet does not know: {sorted(new)}")
                unknown.update(new)
            batch.clear()

        try:
            for sample in source.samples:
                batch.append(sample)
                total += 1
                done = stop.is_set() or (max_samples and total >= max_samples)
                if done or time.monotonic() - flushed >= FLUSH_S:
                    flush()
                    flushed = time.monotonic()
                if done:
                    break
        except TelemetryError as exc:
            raise CommandError(str(exc)) from None
        flush()
        self.stdout.write(f"stored telemetry: {total} samples read")
