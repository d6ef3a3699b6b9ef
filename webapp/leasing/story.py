"""A lease's story, as its page tells it: requested → placed → active → (moved) → ended →
settled, each step with its time, who or what moved it (the audit row's actor) and the
ledger transaction that recorded it; and the attestation state of its nodes over the lease.
Read from the rows the actions wrote (audit events, outbox rows, settlements), the same the
`manage.py timeline` command prints (webapp.leasing.timeline)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from webapp.attestation import selectors as attestations
from webapp.attestation.models import Attestation
from webapp.core.models import AuditEvent
from webapp.leasing.models import Lease
from webapp.outbox import selectors as outbox

PREFIX = "lease."
# the audit action of each step, and the outbox key suffix of the ledger write it caused
STEP_WRITES = {
    "placed": ":create",
    "migrated": ":migrate:",
    "ending": ":end",
    "preempted": ":end",
    "failed": ":end",
    "cancelled": ":end",
}


@dataclass(frozen=True)
class Step:
    step: str  # the audit action without "lease." (requested, placed, active, migrated, ...)
    at: datetime
    actor: str
    tx_id: str  # "" while the ledger has not committed it (or it writes nothing)
    block: int | None
    detail: str = ""


@dataclass(frozen=True)
class NodeQuotes:
    node: str
    valid: int
    invalid: int
    last: Attestation | None


def story(lease: Lease) -> list[Step]:
    audits = AuditEvent.objects.filter(object_type="lease", object_id=str(lease.pk)).order_by(
        "created", "id"
    )
    writes = list(outbox.lease_rows(lease.ledger_id))
    settles = [w for w in writes if w.function == "Settle"]
    moves = iter(w for w in writes if w.function == "MigrateLease")
    steps = []
    for event in audits:
        name = event.action.removeprefix(PREFIX)
        write = None
        if name == "migrated":
            write = next(moves, None)
        elif name in STEP_WRITES:
            write = next((w for w in writes if w.business_key.endswith(STEP_WRITES[name])), None)
        elif name in ("settled", "move_settled") and settles:
            write = settles.pop(0) if name == "move_settled" else settles[-1]
        detail = ""
        if name == "migrated":
            detail = ", ".join(event.data.get("to", []))
        elif event.data.get("reason"):
            detail = str(event.data["reason"])
        steps.append(
            Step(
                name,
                event.created,
                event.actor,
                write.tx_id if write else "",
                write.block_number if write else None,
                detail,
            )
        )
    return steps


def node_quotes(lease: Lease) -> list[NodeQuotes]:
    """Per node the lease ran on: its quotes while the lease held it (valid, invalid) and the
    latest of them."""
    nodes = {a.node for a in lease.attestations.select_related("node")}
    nodes |= {g.node for g in lease.gpus.select_related("node")}
    out = []
    for node in sorted(nodes, key=lambda n: n.name):
        quotes = attestations.quotes_between(node, lease.started, lease.ended)
        out.append(
            NodeQuotes(
                node.name,
                quotes.filter(valid=True).count(),
                quotes.filter(valid=False).count(),
                quotes.order_by("-created").first(),
            )
        )
    return out
