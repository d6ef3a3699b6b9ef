"""`manage.py ledger_verify`: audit the embedded ledger file named by LEDGER_PATH; exit
non-zero naming the block and transaction of every defect."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ledger.audit.chain import verify_ledger


class Command(BaseCommand):
    help = "Re-check every block hash, signature, state row and quote of the ledger."

    def handle(self, *args, **options):
        if settings.LEDGER_BACKEND != "embedded":
            raise CommandError("ledger_verify audits the embedded ledger; LEDGER_BACKEND is not")
        if not settings.LEDGER_PATH.exists():
            raise CommandError(f"no ledger at {settings.LEDGER_PATH} (LEDGER_PATH)")
        report = verify_ledger(settings.LEDGER_PATH)
        for defect in report.defects:
            self.stderr.write(str(defect))
        if not report.ok:
            raise CommandError(f"{len(report.defects)} defect(s) in {settings.LEDGER_PATH}")
        self.stdout.write(
            self.style.SUCCESS(
                f"ledger {settings.LEDGER_PATH} verified: {report.blocks} blocks, "
                f"{report.transactions} transactions ({report.valid} valid), "
                f"{report.quotes} quotes re-verified, {report.keys} state keys"
            )
        )
