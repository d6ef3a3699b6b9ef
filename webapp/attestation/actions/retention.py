"""The quote protocol's own rows past their retention, as an action: each quote leaves an
attestation, a nonce and two audit rows behind it (docs/operations.md, "Telemetry
retention"); at 10,000 GPUs that is millions of rows a day that nothing reads once the
ledger holds the quote and no bill or lease relies on it. `prune_protocol` deletes them after
ATTESTATION_RETENTION_DAYS and keeps everything something still relies on."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import OuterRef, Subquery

from webapp.attestation.models import Attestation
from webapp.attestation.nonce_store import DbNonceStore
from webapp.core.models import AuditEvent
from webapp.fleet.models import Node

# the audit rows every quote writes (record_quote, note_ledger_id); an enrolment, a verdict
# the ledger overturned, a boot or a stale node are rare and kept
PROTOCOL_AUDIT_ACTIONS = ("node.attested", "attestation.recorded")
PRUNE_CHUNK = 2_000


@dataclass(frozen=True)
class Pruned:
    attestations: int
    nonces: int
    audit_rows: int


def newest_valid_per_node() -> set[int]:
    """Each node's newest valid attestation: the clock its next quote is compared with
    (health.recorded_clock) and what a new lease on it relies on (selectors.relied_on)."""
    newest = Attestation.objects.filter(node=OuterRef("pk"), valid=True).order_by("-created", "-pk")
    return {
        pk
        for pk in Node.objects.annotate(newest=Subquery(newest.values("pk")[:1])).values_list(
            "newest", flat=True
        )
        if pk is not None
    }


def prune_protocol(before: datetime, *, hold: datetime | None, actor: str) -> Pruned:
    """Delete what the quote protocol left before `before` that nothing relies on:
    - attestations the ledger recorded (one it never took, a replay or a foreign nonce, is
      kept as evidence of the attempt), that no lease was placed on, with no readings batch
      left (a batch a bill line cites is kept as long as the line, and keeps its
      attestation), that are not their node's newest valid one, and not created after
      `hold` (when the oldest lease still to be settled started: its page lists the quotes
      taken during it);
    - nonces that expired before `before` (challenges now come from the ledger, so the
      registry's purge-as-it-issues never runs; a replay of a purged one is refused as never
      issued, and the ledger, which keeps every challenge, refuses it too);
    - the audit rows each quote writes (PROTOCOL_AUDIT_ACTIONS).
    One audit row for the pass says how many went and from when."""
    cutoff = before if hold is None else min(before, hold)
    keep = newest_valid_per_node()
    attestations = (
        Attestation.objects.filter(created__lt=cutoff, leases__isnull=True, batches__isnull=True)
        .exclude(ledger_tx="")
        .exclude(pk__in=keep)
        .order_by("pk")
    )
    gone = Pruned(
        attestations=_delete_in_chunks(Attestation, attestations),
        nonces=DbNonceStore().purge_expired(before.timestamp()),
        audit_rows=_delete_in_chunks(
            AuditEvent,
            AuditEvent.objects.filter(action__in=PROTOCOL_AUDIT_ACTIONS, created__lt=before),
        ),
    )
    if any(vars(gone).values()):  # the rows are gone; their count and cut-off stay
        AuditEvent.objects.create(
            actor=actor,
            action="attestation.pruned",
            object_type=Attestation._meta.model_name,
            object_id="",
            data={**vars(gone), "before": before.isoformat(), "hold": hold and hold.isoformat()},
        )
    return gone


def _delete_in_chunks(model, rows) -> int:
    deleted = 0
    while ids := list(rows.order_by("pk").values_list("pk", flat=True)[:PRUNE_CHUNK]):
        with transaction.atomic():
            deleted += model.objects.filter(pk__in=ids).delete()[1].get(model._meta.label, 0)
    return deleted
