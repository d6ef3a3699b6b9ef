"""`manage.py lease_worker`: the lease lifecycle (webapp/leasing/lifecycle.py) on a
schedule: place and preempt, end leases that ran their hours, settle. Run as many as you
like; they share the work without doing any of it twice."""

from __future__ import annotations

import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections

from webapp.leasing.lifecycle import run_pass

ACTOR = "lease-worker"


class Command(BaseCommand):
    help = "Run the lease lifecycle: placement, expiry, preemption and settlement."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="one pass, then exit")

    def handle(self, *args, once: bool, **options):
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        while not stop.is_set():
            try:
                result = run_pass(actor=ACTOR, hour_s=settings.LEASE_HOUR_S).as_dict()
            finally:
                close_old_connections()
            if result:
                self.stdout.write(", ".join(f"{k} {v}" for k, v in sorted(result.items())))
            if once:
                break
            stop.wait(settings.LEASE_WORKER_INTERVAL_S)
