"""Why a node is not attested, in one place for its page and the metric: what its agent
reported (a TPM that refused an authorisation), its last quote's failure, a stale or absent
attestation. And the events behind it: TPM restarts its quotes showed (attest.clock), judged
against the clock the node recorded since its enrolment (`recorded_clock`)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Exists, Q, QuerySet, Subquery

from attest import clock as clock_policy
from attest.verdict import SEVERITY_ERROR, ClockInfo, Reason
from webapp.attestation.models import Attestation, NodeEvent
from webapp.core.events import audit, publish_on_commit
from webapp.core.models import AuditEvent
from webapp.fleet.models import Node

NEVER_ATTESTED = "never_attested"
NOT_ENROLLED = "not_enrolled"
ENROLLED_ACTION = "node.enrolled"  # the audit row of an enrolment (actions._register)


BOOT_EVENTS = (clock_policy.POWER_LOSS, clock_policy.REBOOTED)


def recorded_clock(node: Node) -> ClockInfo | None:
    """The clock attest.clock compares a quote with: that of the node's newest valid
    attestation since its AK was enrolled, as the ledger's CLOCK record holds it (written by
    each valid RecordAttestation, cleared by RegisterNode)."""
    newest = clocked_since_enrolment(node).first()
    return ClockInfo.from_dict(newest.clock) if newest else None


def clocked_since_enrolment(node: Node) -> QuerySet[Attestation]:
    """The node's valid attestations with a clock since its AK was last enrolled, newest
    first: one query (the enrolment's time is a subquery)."""
    enrolled = AuditEvent.objects.filter(
        action=ENROLLED_ACTION, object_type="node", object_id=str(node.pk)
    ).order_by("-created", "-id")[:1]
    return (
        node.attestations.filter(valid=True)
        .exclude(clock={})
        .filter(Q(created__gte=Subquery(enrolled.values("created"))) | ~Exists(enrolled))
        .order_by("-created", "-pk")
    )


def record_boot(node: Node, reasons: list[Reason]) -> None:
    """Inside the quote's transaction: the TPM's restart the verdict saw (a power loss, or
    an orderly reboot) becomes an event on the node's page."""
    for reason in reasons:
        if reason.code in BOOT_EVENTS:
            NodeEvent.objects.create(node=node, code=reason.code, detail=reason.detail)
            audit("attestation", f"node.{reason.code}", node, detail=reason.detail)


def agent_reported(node: Node, *, code: str, detail: str, actor: str) -> NodeEvent:
    """The node's agent stopped because its TPM refused an authorisation (retrying would
    count toward the TPM's dictionary-attack lockout): keep why, for its page and metric."""
    with transaction.atomic():
        event = NodeEvent.objects.create(
            node=node, code=code, detail=detail, reported_by_agent=True
        )
        audit(actor, "node.agent_stopped", node, code=code, detail=detail)
        publish_on_commit("node", name=node.name, trust=node.trust)
    return event


def why_not_attested(node: Node) -> dict[str, str] | None:
    """{code, detail} of why the node cannot be leased on now, None when it is attested. An
    agent's report counts until a later valid quote."""
    if node.trust == Node.TRUSTED:
        return None
    report = node.events.filter(reported_by_agent=True).first()
    last_good = node.last_good_attestation
    if report is not None and (last_good is None or report.created > last_good):
        return {"code": report.code, "detail": f"the agent stopped: {report.detail}"}
    if node.status != Node.ACTIVE or not node.ak_public:
        return {"code": NOT_ENROLLED, "detail": f"{node} has no enrolled AK ({node.status})"}
    latest = node.attestations.order_by("-created", "-pk").first()
    if latest is None:
        return {"code": NEVER_ATTESTED, "detail": "no quote received since enrolment"}
    if not latest.valid:
        errors = [r for r in latest.reasons if r.get("severity", SEVERITY_ERROR) == SEVERITY_ERROR]
        first = errors[0] if errors else {"code": "invalid", "detail": "the last quote failed"}
        return {"code": first.get("code", "invalid"), "detail": first.get("detail", "")}
    return {"code": node.trust, "detail": f"the last valid quote is too old ({node.trust})"}
