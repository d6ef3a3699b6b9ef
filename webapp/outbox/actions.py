"""Writes to the outbox beside the relay's: an operator sends a dead letter again; the
retention worker prunes the quote protocol's rows once the ledger has them. One transaction
(a chunk, for pruning), one audit row."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from webapp.core.events import audit
from webapp.core.models import AuditEvent
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


# The quote protocol's rows: once committed, the ledger holds the challenge and the verdict
# (RecordAttestation's readings, quote and validity) and the attestation row holds its tx
# id, so the row adds nothing but its ~5.5 KB of arguments. A lease's rows are kept: they
# are its story (webapp/leasing/story.py) and the reconcile's record of what was sent.
PRUNABLE_FUNCTIONS = ("IssueChallenge", "RecordAttestation")
PRUNE_CHUNK = 5_000


def prune_done(before: datetime, *, actor: str) -> int:
    """Delete the quote protocol's rows committed before `before`; returns how many. Rows
    still to be sent, refused or of any other function are never touched."""
    rows = OutboxEntry.objects.filter(
        function__in=PRUNABLE_FUNCTIONS, status=OutboxEntry.DONE, done__lt=before
    )
    pruned = 0
    while ids := list(rows.order_by("pk").values_list("pk", flat=True)[:PRUNE_CHUNK]):
        with transaction.atomic():
            pruned += (
                OutboxEntry.objects.filter(pk__in=ids).delete()[1].get(OutboxEntry._meta.label, 0)
            )
    if pruned:  # one row for the pass: the rows are gone, their count and cut-off stay
        AuditEvent.objects.create(
            actor=actor,
            action="outbox.pruned",
            object_type=OutboxEntry._meta.model_name,
            object_id="",
            data={"rows": pruned, "before": before.isoformat()},
        )
    return pruned
