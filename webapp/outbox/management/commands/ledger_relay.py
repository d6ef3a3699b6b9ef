"""`manage.py ledger_relay`: the outbox worker. Submits pending ledger changes with retries
until stopped (or once, with --once)."""

from __future__ import annotations

from django.conf import settings

from webapp.core.worker import WorkerCommand
from webapp.outbox.ledger import close_ledger_client, ledger_client
from webapp.outbox.relay import relay_once

IDLE_WAIT_S = 1.0


class Command(WorkerCommand):
    help = "Relay the ledger outbox: submit pending changes, record receipts, retry."

    def setup(self) -> None:
        self.client = ledger_client()

    def teardown(self) -> None:
        close_ledger_client()

    def run_pass(self) -> dict[str, int]:
        return relay_once(self.client, settings.OUTBOX_BATCH)

    def wait_s(self, counts: dict[str, int]) -> float:
        return 0 if counts else IDLE_WAIT_S  # a busy relay goes straight on
