"""The outbox relay: claims pending rows, submits them to the ledger, records receipts.

Claiming is a conditional UPDATE (pending → sending, "another process got there first" is
simply a row this worker does not get). Rows are sent in creation order; a row whose
prerequisites are not on the ledger yet waits. Outcomes:
- committed VALID → done, receipt stored, the domain row gets its ledger tx id;
- the contract refused (EndorsementError) → rejected, reason stored, the domain is told;
- invalid at commit (MVCC) or the ledger unreachable → back to pending with a back-off.
Every contract function is idempotent by business key, so a retry never double-books.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from chaincode_client.interface import (
    EndorsementError,
    LedgerClient,
    LedgerUnavailable,
    Receipt,
    TransactionInvalid,
)
from webapp.core.events import publish_on_commit
from webapp.outbox import hooks
from webapp.outbox.models import OutboxEntry

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 300
STALE_CLAIM_S = 120  # a worker that died mid-send leaves "sending" rows; reclaim them


class NotReady(Exception):
    """A prerequisite of this row is not on the ledger yet; try it again later."""


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def claim(batch: int, now=None) -> list[OutboxEntry]:
    now = now or timezone.now()
    OutboxEntry.objects.filter(
        status=OutboxEntry.SENDING, next_attempt__lt=now - timedelta(seconds=STALE_CLAIM_S)
    ).update(status=OutboxEntry.PENDING)
    ready = OutboxEntry.objects.filter(status=OutboxEntry.PENDING).exclude(next_attempt__gt=now)
    ids = list(ready.order_by("created", "id").values_list("id", flat=True)[:batch])
    me = worker_id()
    mine = []
    for entry_id in ids:
        got = OutboxEntry.objects.filter(id=entry_id, status=OutboxEntry.PENDING).update(
            status=OutboxEntry.SENDING, claimed_by=me, next_attempt=now
        )
        if got:
            mine.append(OutboxEntry.objects.get(id=entry_id))
    return mine


def _retry(entry: OutboxEntry, error: str) -> None:
    entry.attempts += 1
    backoff = min(MAX_BACKOFF_S, 2 ** min(entry.attempts, 9))
    entry.status = OutboxEntry.PENDING
    entry.next_attempt = timezone.now() + timedelta(seconds=backoff)
    entry.last_error = error[:2000]
    entry.save()


def _done(entry: OutboxEntry, receipt: Receipt) -> None:
    with transaction.atomic():
        entry.attempts += 1
        entry.status = OutboxEntry.DONE
        entry.tx_id = receipt.tx_id
        entry.block_number = receipt.block_number
        entry.validation_code = receipt.validation_code
        entry.last_error = ""
        entry.done = timezone.now()
        entry.save()
        hooks.committed(entry, receipt)
        publish_on_commit("ledger", block=receipt.block_number, function=entry.function)


def _rejected(entry: OutboxEntry, message: str) -> None:
    with transaction.atomic():
        entry.attempts += 1
        entry.status = OutboxEntry.REJECTED
        entry.last_error = message[:2000]
        entry.done = timezone.now()
        entry.save()
        hooks.rejected(entry, message)
        publish_on_commit("ledger", function=entry.function, rejected=True)


def send(client: LedgerClient, entry: OutboxEntry) -> str:
    """Submit one claimed row; returns what became of it."""
    try:
        args: dict[str, Any] = hooks.prepare(entry)
    except NotReady as wait:
        _retry(entry, f"waiting: {wait}")
        return "waiting"
    try:
        receipt = client.submit(entry.function, json.dumps(args, sort_keys=True))
    except EndorsementError as exc:
        _rejected(entry, str(exc))
        return "rejected"
    except (TransactionInvalid, LedgerUnavailable) as exc:
        _retry(entry, str(exc))
        return "retry"
    _done(entry, receipt)
    return "done"


def relay_once(client: LedgerClient, batch: int = 100) -> dict[str, int]:
    counts: dict[str, int] = {}
    for entry in claim(batch):
        outcome = send(client, entry)
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts
