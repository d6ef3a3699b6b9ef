"""Reads of the outbox that other apps share: rows by status (the dashboard and the
metrics), the oldest row not yet on the ledger, and the rows about one lease (its story,
its timeline, reconcile)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, Min, QuerySet

from webapp.outbox.models import OutboxEntry
from webapp.outbox.records import lease_prefix

IN_FLIGHT = (OutboxEntry.PENDING, OutboxEntry.SENDING)  # queued or being sent, not yet answered


def status_counts() -> dict[str, int]:
    """Rows per status, every status named (0 where none)."""
    counts = dict(OutboxEntry.objects.values_list("status").annotate(n=Count("id")).order_by())
    return {status: counts.get(status, 0) for status, _ in OutboxEntry.STATUSES}


def oldest_in_flight() -> datetime | None:
    """When the oldest row not yet answered by the ledger was queued (None: none waits)."""
    return OutboxEntry.objects.filter(status__in=IN_FLIGHT).aggregate(t=Min("created"))["t"]


def lease_rows(ledger_id: object) -> QuerySet[OutboxEntry]:
    """The rows about one lease (its ledger id), in the order they were queued."""
    return OutboxEntry.objects.filter(business_key__startswith=lease_prefix(ledger_id)).order_by(
        "created", "id"
    )
