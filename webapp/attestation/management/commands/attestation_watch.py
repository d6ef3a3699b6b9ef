"""`manage.py attestation_watch`: every ATTESTATION_INTERVAL_S, mark trusted nodes whose
last good quote is older than their PCR policy allows as stale (not leasable)."""

from __future__ import annotations

import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand

from webapp.attestation.service import mark_stale


class Command(BaseCommand):
    help = "Mark nodes without a fresh good quote as stale, on a schedule."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true")

    def handle(self, *args, once: bool, **options):
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        while True:
            stale = mark_stale()
            if stale:
                self.stdout.write(f"{stale} node(s) went stale")
            if once or stop.wait(settings.ATTESTATION_INTERVAL_S):
                break
