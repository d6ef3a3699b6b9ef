"""A lease's receipt: its ledger records with the blocks and endorsements they sit in, for
the tenant API and the console alike. Embedded ledger: exported from its file. Fabric: the
raw blocks holding the lease's transactions, fetched through the peer (QSCC)."""

from __future__ import annotations

import sqlite3
from typing import Any

from django.conf import settings

from chaincode_client.fabric.receipts import export_fabric_receipt
from chaincode_client.interface import LedgerUnavailable
from ledger.audit.receipt import export_receipt
from webapp.leasing.models import Lease
from webapp.outbox.ledger import ledger_client

NOT_ON_LEDGER = 409
LEDGER_UNREACHABLE = 503


class ReceiptUnavailable(Exception):
    """No receipt can be given now; `status` is the HTTP answer and the message says why."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def lease_receipt(lease: Lease) -> dict[str, Any]:
    """Check it offline with `wattlease ledger verify-receipt FILE --trust ROOTS`."""
    try:
        if settings.LEDGER_BACKEND == "embedded":
            return export_receipt(settings.LEDGER_PATH, str(lease.ledger_id))
        return export_fabric_receipt(ledger_client(), str(lease.ledger_id))
    except (KeyError, OSError, sqlite3.Error):
        raise ReceiptUnavailable(
            NOT_ON_LEDGER, f"lease {lease.pk} is not on the ledger yet"
        ) from None
    except LedgerUnavailable as exc:
        raise ReceiptUnavailable(
            LEDGER_UNREACHABLE, f"the ledger is unreachable, try again: {exc}"
        ) from None
