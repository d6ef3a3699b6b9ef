"""`manage.py ledger_relay`: the outbox worker. Submits pending ledger changes with retries
until stopped (or once, with --once)."""

from __future__ import annotations

import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand

from webapp.outbox.ledger import close_ledger_client, ledger_client
from webapp.outbox.relay import relay_once

IDLE_WAIT_S = 1.0


class Command(BaseCommand):
    help = "Relay the ledger outbox: submit pending changes, record receipts, retry."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="one pass, then exit")

    def handle(self, *args, once: bool, **options):
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        client = ledger_client()
        try:
            while not stop.is_set():
                counts = relay_once(client, settings.OUTBOX_BATCH)
                if counts:
                    self.stdout.write(", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
                if once:
                    break
                if not counts:
                    stop.wait(IDLE_WAIT_S)
        finally:
            close_ledger_client()
