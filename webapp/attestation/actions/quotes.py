"""Challenges and quotes, as actions: the ledger's challenge handed to the agent, the
quote verified and recorded (with the readings it binds), the ledger's verdict taken, and
nodes whose last good quote is too old marked stale. Each runs in one transaction with its
audit row, the ledger outbox rows and dashboard events after commit."""

from __future__ import annotations

import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from attest.nonces import NonceRecord, NonceRegistry
from attest.pcrfile import PcrValues
from attest.readings import qualifying_data
from attest.verdict import SEVERITY_INFO
from attest.verifier import verify_quote
from ledger.contract.challenges import window_s
from ledger.units import NS_PER_S
from webapp.attestation import health
from webapp.attestation import telemetry as node_telemetry
from webapp.attestation.actions.enrolment import EnrolmentRefused, policy_of
from webapp.attestation.models import Attestation, Nonce
from webapp.attestation.nonce_store import DbNonceStore
from webapp.core.events import audit, publish_on_commit
from webapp.fleet.models import Node
from webapp.outbox.records import (
    attestation_answered,
    challenge_requested,
    challenges_in_flight,
    challenges_requested,
    pcr_policy_document,
)

CHALLENGE_MARGIN_S = 10  # a challenge this close to expiry is not handed out: no time to quote
CHALLENGE_LEAD_S = 10  # a running agent's next challenge is asked for this long before it comes


def registry() -> NonceRegistry:
    return NonceRegistry(DbNonceStore(), clock=time.time)


def open_challenges(subject: str | F, now_s: float):
    """The challenges the ledger issued for a node (`subject`: its name, or an expression
    such as OuterRef("name")) that its agent may still be handed at `now_s`: not answered,
    and not closing within CHALLENGE_MARGIN_S."""
    return Nonce.objects.filter(
        subject=subject, consumed=False, expires_at__gt=now_s + CHALLENGE_MARGIN_S
    )


def issue_challenge(node: Node) -> bytes | None:
    """The nonce of the node's open ledger challenge, or None while the ledger is issuing one.

    The ledger derives challenge nonces from its own transactions (IssueChallenge), so the
    server only asks for one through the outbox and hands it out once the relay has it."""
    if node.status != Node.ACTIVE or not node.ak_public:
        raise EnrolmentRefused([{"code": "not_enrolled", "detail": f"{node} has no AK"}])
    with transaction.atomic():
        open_challenge = open_challenges(node.name, time.time()).order_by("-expires_at").first()
        if open_challenge is not None:
            return bytes.fromhex(open_challenge.value)
        challenge_requested(node)
    return None


def challenge_ahead(now=None) -> int:
    """Ask the ledger for the next challenge of each node whose agent is due within
    CHALLENGE_LEAD_S (its last good quote about ATTESTATION_INTERVAL_S ago) and has none open
    or on its way, so that its request is answered at once, not with a 202 and polls while
    the relay commits IssueChallenge. Two queries however many nodes are due; returns how
    many challenges were asked for.

    A node whose agent missed its round by more than the lead gets none (it asks itself when
    it comes back), nor one whose policy's challenge window would close before the agent came.
    The ledger counts an attestation's age from its challenge's issue, so a challenge issued
    ahead makes the next attestation look older by at most the lead, never younger."""
    now = now or timezone.now()
    due = now - timedelta(seconds=settings.ATTESTATION_INTERVAL_S)
    lead = timedelta(seconds=CHALLENGE_LEAD_S)
    due_soon = (
        Node.objects.filter(
            status=Node.ACTIVE,
            trust=Node.TRUSTED,
            last_good_attestation__lte=due + lead,
            last_good_attestation__gt=due - lead,
        )
        .exclude(Exists(open_challenges(OuterRef("name"), now.timestamp())))
        .exclude(Exists(challenges_in_flight(OuterRef("name"))))
        .select_related("pcr_policy")
    )
    shortest_window_s = CHALLENGE_LEAD_S + 2 * CHALLENGE_MARGIN_S
    names = [
        node.name
        for node in due_soon
        if window_s(pcr_policy_document(node.pcr_policy)) >= shortest_window_s
    ]
    return len(challenges_requested(names))


def challenge_issued(challenge: dict) -> None:
    """The relay's word that the ledger issued a challenge: keep it for the node's agent."""
    DbNonceStore().put(
        NonceRecord(
            bytes.fromhex(challenge["nonce"]),
            challenge["node_id"],
            challenge["expires_ns"] / NS_PER_S,
        )
    )


def record_quote(
    node: Node,
    *,
    nonce: bytes,
    quote: bytes,
    signature: bytes,
    pcr_values: PcrValues,
    actor: str,
    telemetry: str = "",
) -> Attestation:
    """Verify a quote against the node's AK and policy, over the nonce bound to the readings
    sent with it (`telemetry`, canonical CSV rows; docs/billing.md, "Attested telemetry");
    store the verdict and the readings either way."""
    try:
        parsed = node_telemetry.parse(node, telemetry)
    except node_telemetry.TelemetryRefused as refused:
        raise EnrolmentRefused([{"code": "telemetry_refused", "detail": str(refused)}]) from None
    digests = node_telemetry.digests(parsed.groups)
    with transaction.atomic():
        node = Node.objects.select_for_update().select_related("pcr_policy").get(pk=node.pk)
        check = registry().consume(nonce, node.name)
        previous = health.recorded_clock(node)
        verdict = verify_quote(
            ak_public=bytes(node.ak_public or b""),
            quote=quote,
            signature=signature,
            pcr_values=pcr_values,
            nonce=qualifying_data(nonce, digests),
            policy=policy_of(node),
            previous_clock=previous,
        )
        if not check.ok:
            verdict.add(check.code, check.detail)
        attestation = Attestation.objects.create(
            node=node,
            nonce=nonce.hex(),
            valid=verdict.valid,
            reasons=[r.to_dict() for r in verdict.reasons],
            quote=quote,
            signature=signature,
            pcr_values={
                bank: {str(i): v.hex() for i, v in pcrs.items()}
                for bank, pcrs in pcr_values.items()
            },
            clock=verdict.clock.to_dict() if verdict.clock else {},
        )
        try:
            node_telemetry.keep(attestation, parsed)
        except node_telemetry.TelemetryRefused as refused:  # nothing of the quote is kept
            raise EnrolmentRefused(
                [{"code": "telemetry_refused", "detail": str(refused)}]
            ) from None
        health.record_boot(node, verdict.reasons)
        node.trust = Node.TRUSTED if verdict.valid else Node.FAILED
        if verdict.valid:
            node.last_good_attestation = attestation.created
        node.save(update_fields=["trust", "last_good_attestation"])
        audit(actor, "node.attested", node, valid=verdict.valid, codes=verdict.codes())
        if check.ok:  # the ledger refuses a replayed nonce anyway; don't send one
            attestation_answered(attestation, node_telemetry.texts(parsed.groups))
        publish_on_commit("node", name=node.name, trust=node.trust)
    return attestation


def note_ledger_id(attestation: Attestation, ledger_id: str, *, actor: str) -> Attestation:
    """The ledger recorded this verdict under `ledger_id` (the id the contract answered with)."""
    with transaction.atomic():
        attestation = Attestation.objects.select_for_update().get(pk=attestation.pk)
        if attestation.ledger_tx != ledger_id:
            attestation.ledger_tx = ledger_id
            attestation.save(update_fields=["ledger_tx"])
            audit(actor, "attestation.recorded", attestation, ledger_id=ledger_id)
    return attestation


def take_ledger_verdict(attestation: Attestation, record: dict, *, actor: str) -> Attestation:
    """The ledger's verdict on a quote stands: every endorser re-verified it against the PCR
    policy both organisations approved. Where this server's verdict differed (its copy of the
    policy edited but not approved on the ledger, or an approval it has not seen), the
    attestation, its readings' standing, and, when it is the node's newest, the node's trust
    follow the ledger's (`record`: the RecordAttestation record); the difference is audited."""
    valid = record.get("valid")
    if not isinstance(valid, bool) or valid == attestation.valid:
        return attestation
    verdict = record.get("verdict")
    reasons = verdict.get("reasons") if isinstance(verdict, dict) else None
    note = {
        "code": "ledger_verdict",
        "detail": f"the ledger's endorsers found the quote {'valid' if valid else 'invalid'} "
        f"against the approved PCR policy; this server had found it "
        f"{'valid' if attestation.valid else 'invalid'} against its own copy",
        "severity": SEVERITY_INFO,
    }
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=attestation.node_id)
        attestation.valid = valid
        attestation.reasons = [*(reasons if isinstance(reasons, list) else []), note]
        attestation.save(update_fields=["valid", "reasons"])
        if node.attestations.order_by("-created", "-pk").first() == attestation:
            node.trust = Node.TRUSTED if valid else Node.FAILED
            if valid:
                node.last_good_attestation = attestation.created
            node.save(update_fields=["trust", "last_good_attestation"])
            publish_on_commit("node", name=node.name, trust=node.trust)
        audit(actor, "node.ledger_verdict", node, valid=valid, attestation=attestation.pk)
    return attestation


def mark_stale(now=None) -> int:
    """Trusted nodes whose last good quote is older than their policy allows become stale."""
    now = now or timezone.now()
    stale = 0
    for node in Node.objects.filter(trust=Node.TRUSTED).select_related("pcr_policy"):
        limit = timedelta(seconds=node.pcr_policy.effective_max_age_s())
        if node.last_good_attestation is None or now - node.last_good_attestation > limit:
            with transaction.atomic():
                Node.objects.filter(pk=node.pk, trust=Node.TRUSTED).update(trust=Node.STALE)
                audit("attestation-watch", "node.stale", node)
                publish_on_commit("node", name=node.name, trust=Node.STALE)
            stale += 1
    return stale
