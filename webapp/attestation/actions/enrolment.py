"""Node enrolment, as actions: the EK chain against the approved roots, each organisation's
credential activation, the inventory quote, and the registration queued for the ledger.
Each runs in one transaction with its audit row and dashboard events after commit.

The cryptography is attest's; this module decides what a verdict means for a node."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from django.conf import settings
from django.db import transaction

from attest import enrol
from attest.errors import PolicyError
from attest.inventory import inventory_digest
from attest.pcrfile import PcrValues
from attest.policy import PcrPolicy
from attest.verdict import SEVERITY_ERROR
from attest.verifier import verify_quote
from ledger.contract.terms import reported_generation_mismatches
from webapp.attestation import health
from webapp.attestation.models import EnrolmentSession
from webapp.core.events import audit, publish_on_commit
from webapp.fleet import rate_card
from webapp.fleet.models import Node
from webapp.outbox.records import (
    node_registered,
)

MAX_CA_FILES = 64


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
    audit(actor, health.ENROLLED_ACTION, node, ak_name=node.ak_name, ek_name=node.ek_name)
    node_registered(
        node,
        ek_public=bytes(session.ek_public),
        ek_certificate=bytes(session.ek_certificate),
        activated_ns=time.time_ns(),
        inventory=reported.inventory,
        enrolment_quote=reported.evidence(),
    )
    publish_on_commit("node", name=node.name, trust=node.trust)
