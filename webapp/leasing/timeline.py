"""One lease's history on one time axis (UTC, the database's clock for every row): its audit
events, the attestations it relied on, its ledger commits (outbox rows done, with tx and
block) and its cost changes (settlements). Each settlement is paired with the audit event
that caused it (a migration, or the final settlement); a pair further apart than the
tolerance is flagged: the cost and the action that should coincide do not."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from webapp.core.models import AuditEvent
from webapp.leasing.models import Lease
from webapp.outbox import selectors as outbox

DEFAULT_TOLERANCE_S = 5.0
COST_CAUSES = ("lease.migrated", "lease.settled")  # the audit events a settlement follows


@dataclass(frozen=True)
class Moment:
    at: datetime
    source: str  # audit, attestation, ledger, cost
    what: str

    def line(self) -> str:
        return f"{self.at.isoformat(timespec='milliseconds')}  {self.source:<11} {self.what}"


@dataclass(frozen=True)
class Timeline:
    moments: list[Moment]
    flags: list[str]


def timeline(lease: Lease, tolerance_s: float = DEFAULT_TOLERANCE_S) -> Timeline:
    audits = list(
        AuditEvent.objects.filter(object_type="lease", object_id=str(lease.pk)).order_by("created")
    )
    moments = [Moment(a.created, "audit", f"{a.action} by {a.actor} {a.data}") for a in audits]
    moments += [
        Moment(a.created, "attestation", f"{a.node.name} {'valid' if a.valid else 'INVALID'}")
        for a in lease.attestations.select_related("node")
    ]
    for row in outbox.lease_rows(lease.ledger_id):
        moments.append(Moment(row.created, "ledger", f"{row.function} queued"))
        if row.done is not None:
            outcome = f"block {row.block_number} tx {row.tx_id}" if row.tx_id else row.status
            moments.append(Moment(row.done, "ledger", f"{row.function} {outcome}"))
    settlements = list(lease.settlements.order_by("seq"))
    moments += [
        Moment(
            s.created,
            "cost",
            f"settlement #{s.seq}: total {s.total_micro} micro-units (capacity "
            f"{s.capacity_micro} + measured energy {s.measured_energy_micro}; settlement "
            f"{s.settlement_micro} against priced energy {s.priced_energy_micro})",
        )
        for s in settlements
    ]
    causes = [a for a in audits if a.action in COST_CAUSES]
    flags = []
    for settlement, cause in zip(settlements, causes, strict=False):
        apart = abs((settlement.created - cause.created).total_seconds())
        if apart > tolerance_s:
            flags.append(
                f"settlement #{settlement.seq} and {cause.action} are {apart:.1f} s apart "
                f"(tolerance {tolerance_s:g} s)"
            )
    return Timeline(sorted(moments, key=lambda m: m.at), flags)
