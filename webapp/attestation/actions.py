"""Node enrolment and attestation, as actions: each runs in one transaction, writes an audit
row and the ledger outbox rows, and publishes dashboard events after commit.

The cryptography is attest's; this module decides what a verdict means for a node.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from cryptography import x509
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from attest import enrol
from attest.errors import PolicyError
from attest.inventory import inventory_digest
from attest.nonces import NonceRecord, NonceRegistry
from attest.pcrfile import PcrValues
from attest.policy import PcrPolicy
from attest.readings import qualifying_data
from attest.verdict import SEVERITY_ERROR, SEVERITY_INFO, ClockInfo
from attest.verifier import verify_quote
from ledger.contract.terms import reported_generation_mismatches
from webapp.attestation import health
from webapp.attestation import telemetry as node_telemetry
from webapp.attestation.models import Attestation, EnrolmentSession, Nonce
from webapp.attestation.nonce_store import DbNonceStore
from webapp.core import tokens
from webapp.core.events import audit, publish_on_commit
from webapp.fleet import rate_card
from webapp.fleet.models import Node
from webapp.outbox.records import (
    attestation_answered,
    challenge_requested,
    enqueue,
    node_registered,
)

NODE_TOKEN_KIND = "wn"
MAX_CA_FILES = 64
NS_PER_S = 1_000_000_000
CHALLENGE_MARGIN_S = 10  # a challenge this close to expiry is not handed out: no time to quote


class EnrolmentRefused(Exception):
    def __init__(self, reasons: list[dict[str, str]]) -> None:
        super().__init__("; ".join(f"{r['code']}: {r['detail']}" for r in reasons))
        self.reasons = reasons


def load_ca_certificates(directory: Path | None = None) -> list[x509.Certificate]:
    """Every PEM certificate in the EK CA directory (roots and intermediates)."""
    directory = Path(directory or settings.TPM_EK_CA_DIR)
    certs: list[x509.Certificate] = []
    for path in sorted(directory.glob("*.pem"))[:MAX_CA_FILES]:
        certs.extend(x509.load_pem_x509_certificates(path.read_bytes()))
    return certs


def _split_roots(certs: list[x509.Certificate]) -> tuple[list, list]:
    roots = [c for c in certs if c.issuer == c.subject]
    return roots, [c for c in certs if c.issuer != c.subject]


def policy_of(node: Node) -> PcrPolicy:
    return PcrPolicy.from_json({"pcrs": node.pcr_policy.pcrs})


def issue_node_credential(node: Node, *, actor: str) -> str:
    """A fresh bearer token for the node's agent; the previous one stops working."""
    new = tokens.new_token(NODE_TOKEN_KIND)
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(
            credential_prefix=new.prefix, credential_digest=new.digest
        )
        audit(actor, "node.credential_issued", node)
    return new.token


def node_for_token(token: str) -> Node | None:
    parsed = tokens.parse(NODE_TOKEN_KIND, token)
    if parsed is None:
        return None
    node = Node.objects.filter(credential_prefix=parsed[0]).select_related("pcr_policy").first()
    if node is None or not tokens.matches(node.credential_digest, parsed[1]):
        return None
    return node


def _policy_gaps(node: Node) -> list[dict[str, str]]:
    """The ledger registers a node only with a policy it records (attest.policy's one rule:
    its banks, a golden value for every selected PCR), so a node enrols only then."""
    try:
        problems = policy_of(node).ledger_problems()
    except PolicyError as exc:  # stored without the model's checks
        problems = [str(exc)]
    if not problems:
        return []
    return [
        {
            "code": "policy_incomplete",
            "detail": f"PCR policy {node.pcr_policy.name!r} cannot go on the ledger: "
            f"{'; '.join(problems)}; an operator must fix it before nodes enrol",
        }
    ]


@dataclass(frozen=True)
class CredentialChallenge:
    credential_blob: bytes
    secret: bytes


def start_enrolment(
    node: Node, *, ek_public: bytes, ek_certificate: bytes | None, ak_public: bytes, actor: str
) -> CredentialChallenge:
    """Check the EK certificate chain and the AK, then wrap a secret only that TPM can unwrap
    with ActivateCredential (MakeCredential)."""
    incomplete = _policy_gaps(node)
    if incomplete:
        audit(actor, "node.enrolment_refused", node, reasons=incomplete)
        raise EnrolmentRefused(incomplete)
    roots, intermediates = _split_roots(load_ca_certificates())
    challenge, result = enrol.start_enrolment(
        ek_public, ek_certificate, ak_public, roots, intermediates
    )
    if challenge is None:
        reasons = [r.to_dict() for r in result.reasons]
        audit(actor, "node.enrolment_refused", node, reasons=reasons)
        raise EnrolmentRefused(reasons)
    with transaction.atomic():
        EnrolmentSession.objects.update_or_create(
            node=node,
            defaults={
                "ak_public": challenge.ak_public,
                "ek_public": ek_public,
                "ek_certificate": ek_certificate or b"",
                "ak_name": challenge.ak_name.hex(),
                "ek_name": challenge.ek_name.hex(),
                "expected_digest": hashlib.sha256(challenge.expected).hexdigest(),
            },
        )
        audit(actor, "node.enrolment_started", node, ak_name=challenge.ak_name.hex())
    return CredentialChallenge(challenge.credential_blob, challenge.secret)


@dataclass(frozen=True)
class InventoryQuote:
    """The agent's quote whose qualifying data is its GPU inventory's digest
    (attest.inventory): the AK's signature covers the GPUs the measured node reported."""

    inventory: list[dict[str, str]]
    quote: bytes
    signature: bytes
    pcr_values: PcrValues

    def evidence(self) -> dict:
        return {
            "quote": base64.b64encode(self.quote).decode(),
            "signature": base64.b64encode(self.signature).decode(),
            "pcr_values": {
                bank: {str(i): v.hex() for i, v in pcrs.items()}
                for bank, pcrs in self.pcr_values.items()
            },
        }


def _inventory_refusals(node: Node, ak_public: bytes, reported: InventoryQuote) -> list[dict]:
    """Why the enrolment quote cannot go to the ledger (whose endorsers check the same)."""
    registered_gpus = [
        {"uuid": uuid, "generation": generation}
        for uuid, generation in node.gpus.values_list("uuid", "generation__catalogue_id")
    ]
    registered = sorted(g["uuid"] for g in registered_gpus)
    uuids = sorted(str(g.get("uuid")) for g in reported.inventory)
    if uuids != registered:
        return [
            {
                "code": "inventory_mismatch",
                "detail": f"the node reported GPUs {uuids}; {node} has {registered}",
            }
        ]
    try:
        digest = inventory_digest(node.name, reported.inventory)
    except ValueError as exc:
        return [{"code": "inventory_malformed", "detail": str(exc)}]
    card = rate_card.in_force().card
    mismatched = reported_generation_mismatches(card, registered_gpus, reported.inventory)
    if mismatched:
        return [{"code": "generation_mismatch", "detail": "; ".join(mismatched)}]
    verdict = verify_quote(
        ak_public=ak_public,
        quote=reported.quote,
        signature=reported.signature,
        pcr_values=reported.pcr_values,
        nonce=digest,
        policy=policy_of(node),
    )
    return [r.to_dict() for r in verdict.reasons if r.severity == SEVERITY_ERROR]


def finish_enrolment(
    node: Node, *, answer: bytes, enrolment_quote: InventoryQuote, actor: str
) -> Node:
    """Check the ActivateCredential answer and the quote over the node's GPU inventory, then
    register the node on the ledger with its EK binding."""
    refused: list[dict] = []
    with transaction.atomic():
        session = EnrolmentSession.objects.select_for_update().filter(node=node).first()
        if session is None:
            refused = [{"code": "no_enrolment", "detail": "no enrolment in progress: start one"}]
        else:
            session.delete()  # one answer per challenge, right or wrong
            if not hmac.compare_digest(hashlib.sha256(answer).hexdigest(), session.expected_digest):
                refused = [
                    {
                        "code": "credential_mismatch",
                        "detail": "ActivateCredential answer is wrong: the AK is not in the TPM "
                        "that holds this EK",
                    }
                ]
            else:
                refused = _inventory_refusals(node, bytes(session.ak_public), enrolment_quote)
        if refused:
            audit(actor, "node.enrolment_refused", node, reasons=refused)
        else:
            _register(node, session, enrolment_quote, actor)
    if refused:  # raised after the commit, so the refusal and its reason are on record
        raise EnrolmentRefused(refused)
    node.refresh_from_db()
    return node


def _register(node: Node, session: EnrolmentSession, reported: InventoryQuote, actor: str) -> None:
    node.ak_public = bytes(session.ak_public)
    node.ak_name = session.ak_name
    node.ek_name = session.ek_name
    node.status = Node.ACTIVE
    node.trust = Node.UNKNOWN
    node.last_good_attestation = None
    node.save()
    audit(actor, "node.enrolled", node, ak_name=node.ak_name, ek_name=node.ek_name)
    node_registered(
        node,
        ek_public=bytes(session.ek_public),
        ek_certificate=bytes(session.ek_certificate),
        activated_ns=time.time_ns(),
        inventory=reported.inventory,
        enrolment_quote=reported.evidence(),
    )
    publish_on_commit("node", name=node.name, trust=node.trust)


def registry() -> NonceRegistry:
    return NonceRegistry(DbNonceStore(), clock=time.time)


def issue_challenge(node: Node) -> bytes | None:
    """The nonce of the node's open ledger challenge, or None while the ledger is issuing one.

    The ledger derives challenge nonces from its own transactions (IssueChallenge), so the
    server only asks for one through the outbox and hands it out once the relay has it."""
    if node.status != Node.ACTIVE or not node.ak_public:
        raise EnrolmentRefused([{"code": "not_enrolled", "detail": f"{node} has no AK"}])
    with transaction.atomic():
        usable_until = time.time() + CHALLENGE_MARGIN_S
        open_challenge = (
            Nonce.objects.filter(subject=node.name, consumed=False, expires_at__gt=usable_until)
            .order_by("-expires_at")
            .first()
        )
        if open_challenge is not None:
            return bytes.fromhex(open_challenge.value)
        challenge_requested(node)
    return None


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
        batches = node_telemetry.parse(node, telemetry)
    except node_telemetry.TelemetryRefused as refused:
        raise EnrolmentRefused([{"code": "telemetry_refused", "detail": str(refused)}]) from None
    digests = node_telemetry.digests(batches)
    with transaction.atomic():
        node = Node.objects.select_for_update().select_related("pcr_policy").get(pk=node.pk)
        check = registry().consume(nonce, node.name)
        previous = node.attestations.filter(valid=True).exclude(clock={}).first()
        verdict = verify_quote(
            ak_public=bytes(node.ak_public or b""),
            quote=quote,
            signature=signature,
            pcr_values=pcr_values,
            nonce=qualifying_data(nonce, digests),
            policy=policy_of(node),
            previous_clock=ClockInfo.from_dict(previous.clock) if previous else None,
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
            node_telemetry.keep(attestation, batches)
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
            attestation_answered(attestation, node_telemetry.texts(batches))
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


def revoke_ak(node: Node, *, actor: str) -> Node:
    """Forget the node's AK: it is unleasable until its agent enrols again."""
    with transaction.atomic():
        old = node.ak_name
        Node.objects.filter(pk=node.pk).update(
            ak_public=None,
            ak_name="",
            status=Node.ENROLLING,
            trust=Node.UNKNOWN,
            last_good_attestation=None,
        )
        audit(actor, "node.ak_revoked", node, ak_name=old)
        if old:
            enqueue(
                f"node:{node.name}:ak:{old}:revoke",
                "RevokeAK",
                {"node_id": node.name, "reason": f"revoked by {actor}"},
            )
        publish_on_commit("node", name=node.name, trust=Node.UNKNOWN)
    node.refresh_from_db()
    return node


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
