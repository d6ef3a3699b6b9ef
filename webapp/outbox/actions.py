"""Operator writes to the outbox: send a dead letter again. One transaction, one audit row."""

from __future__ import annotations

from django.db import transaction

from webapp.core.events import audit
from webapp.outbox import hooks
from webapp.outbox.models import OutboxEntry


class RetryRefused(Exception):
    pass


def retry_entry(entry: OutboxEntry, *, actor: str) -> OutboxEntry:
    """Put a rejected or backing-off row back in the queue, to be sent on the relay's next
    pass. Refused for rows sent already or being sent, and for a refusal the domain has
    acted on (a lease the ledger refused has failed: ask for a new lease instead)."""
    with transaction.atomic():
        entry = OutboxEntry.objects.select_for_update().get(pk=entry.pk)
        if entry.status in (OutboxEntry.DONE, OutboxEntry.SENDING):
            raise RetryRefused(f"[outbox.retry] {entry.business_key} is {entry.status}")
        if entry.status == OutboxEntry.REJECTED and hooks.reacts_to_rejection(entry.function):
            raise RetryRefused(
                f"[outbox.retry] {entry.business_key}: the ledger's refusal of "
                f"{entry.function} was already acted on; make a new request instead"
            )
        previous = entry.status
        entry.status, entry.next_attempt = OutboxEntry.PENDING, None
        entry.save(update_fields=["status", "next_attempt"])
        audit(actor, "outbox.retried", entry, business_key=entry.business_key, previous=previous)
    return entry
