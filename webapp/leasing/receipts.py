"""A lease's receipt: its ledger records with the blocks and endorsements they sit in, for
the tenant API and the console alike."""

from __future__ import annotations

import sqlite3
from typing import Any

from django.conf import settings

from ledger.receipt import export_receipt
from webapp.leasing.models import Lease

NOT_ON_LEDGER = 409
ONLY_EMBEDDED = 501


class ReceiptUnavailable(Exception):
    """No receipt can be given now; `status` is the HTTP answer and the message says why."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def lease_receipt(lease: Lease) -> dict[str, Any]:
    """Check it offline with `wattlease ledger verify-receipt FILE`."""
    if settings.LEDGER_BACKEND != "embedded":
        raise ReceiptUnavailable(
            ONLY_EMBEDDED,
            "receipts are exported from the embedded ledger; on Fabric, query the channel "
            "(GetHistory)",
        )
    try:
        return export_receipt(settings.LEDGER_PATH, str(lease.ledger_id))
    except (KeyError, OSError, sqlite3.Error):
        raise ReceiptUnavailable(
            NOT_ON_LEDGER, f"lease {lease.pk} is not on the ledger yet"
        ) from None
