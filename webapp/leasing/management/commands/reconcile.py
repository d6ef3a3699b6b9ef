"""`manage.py reconcile`: the database against the ledger; every difference on its own line,
exit status 1 when there is any (docs/operations.md)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from webapp.leasing.reconcile import drift
from webapp.outbox.ledger import close_ledger_client, ledger_client


class Command(BaseCommand):
    help = "Compare leases, settlements and attestations with the ledger; exit 1 on drift."

    def handle(self, *args, **options):
        try:
            found = drift(ledger_client())
        finally:
            close_ledger_client()
        for line in found:
            self.stdout.write(line)
        if found:
            raise CommandError(f"{len(found)} difference(s) between the database and the ledger")
        self.stdout.write("no drift: the database agrees with the ledger")
