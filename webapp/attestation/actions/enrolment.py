"""Node enrolment, as actions: the EK chain against the approved roots, each organisation's
credential activation, the inventory quote, and the registration queued for the ledger.
Each runs in one transaction with its audit row and dashboard events after commit.

The cryptography is attest's; this module decides what a verdict means for a node."""

from __future__ import annotations

import base64
import hashlib
import hmac
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
from attest.registrar import RegistrarError
from attest.registrar_service import RegistrarClient, RegistrarUnavailable
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
REGISTRAR_CHALLENGE = ("challenge_id", "credential_blob", "secret")


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
    # each organisation's registrar's own round: {org, challenge_id, credential_blob, secret}
    registrar_challenges: list[dict[str, str]]


def _registrars() -> list[RegistrarClient]:
    return [RegistrarClient(org, url) for org, url in settings.REGISTRARS.items()]


def _registrar_refusal(org: str, exc: Exception) -> dict[str, str]:
    if isinstance(exc, RegistrarError):
        return {"code": f"registrar_{exc.code}", "detail": f"{org}'s registrar: {exc}"}
    return {"code": "registrar_unavailable", "detail": str(exc)}


def _registrar_challenges(node: Node, body: dict[str, str]) -> list[dict[str, str]]:
    """Relay the node's EK, certificate and AK to every organisation's registrar, which runs
    its own MakeCredential (docs/operations.md, "Registrars")."""
    sent = []
    for registrar in _registrars():
        try:
            answer = registrar.challenge({"node_id": node.name, **body})
        except (RegistrarError, RegistrarUnavailable) as exc:
            raise EnrolmentRefused([_registrar_refusal(registrar.org, exc)]) from None
        sent.append({"org": registrar.org, **{k: answer[k] for k in REGISTRAR_CHALLENGE}})
    return sent


def _registrar_certificates(answers: list[dict]) -> tuple[dict[str, dict], list[dict]]:
    """Each registrar's signed AK certificate for the TPM's answer to its own challenge;
    (certificates by organisation, refusals)."""
    given = {a["org"]: a for a in answers}
    certificates: dict[str, dict] = {}
    for registrar in _registrars():
        answer = given.get(registrar.org)
        if answer is None:
            return {}, [
                {"code": "registrar_missing", "detail": f"no answer to {registrar.org}'s challenge"}
            ]
        try:
            signed = registrar.activate(
                answer["challenge_id"], base64.b64encode(answer["answer"]).decode()
            )
        except (RegistrarError, RegistrarUnavailable) as exc:
            return {}, [_registrar_refusal(registrar.org, exc)]
        certificates[registrar.org] = {
            "ak_certificate": signed["ak_certificate"],
            "signature": signed["signature"],
        }
    return certificates, []


def _certificate_refusals(node: Node, session: EnrolmentSession, certificates: dict) -> list:
    """The registrars certified this node's AK and EK (the ledger checks the same)."""
    want = {"node_id": node.name, "ak_name": session.ak_name, "ek_name": session.ek_name}
    for org, certificate in certificates.items():
        statement = certificate["ak_certificate"]
        wrong = [f for f, v in want.items() if statement.get(f) != v]
        if wrong or statement.get("org") != org:
            return [
                {
                    "code": "registrar_mismatch",
                    "detail": f"{org}'s registrar certified another {', '.join(wrong) or 'org'}",
                }
            ]
    return []


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
    relayed = {
        "ek_public": base64.b64encode(ek_public).decode(),
        "ek_certificate": base64.b64encode(ek_certificate or b"").decode(),
        "ak_public": base64.b64encode(ak_public).decode(),
    }
    try:
        registrar_challenges = _registrar_challenges(node, relayed)
    except EnrolmentRefused as refused:
        audit(actor, "node.enrolment_refused", node, reasons=refused.reasons)
        raise
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
    return CredentialChallenge(challenge.credential_blob, challenge.secret, registrar_challenges)


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
    node: Node,
    *,
    answer: bytes,
    enrolment_quote: InventoryQuote,
    actor: str,
    registrar_answers: list[dict] | None = None,
) -> Node:
    """Check the ActivateCredential answer and the quote over the node's GPU inventory, get
    each registrar's AK certificate for the TPM's answer to its own challenge, then register
    the node on the ledger with its EK binding."""
    certificates, registrar_refused = _registrar_certificates(registrar_answers or [])
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
                refused = (
                    _inventory_refusals(node, bytes(session.ak_public), enrolment_quote)
                    or registrar_refused
                    or _certificate_refusals(node, session, certificates)
                )
        if refused:
            audit(actor, "node.enrolment_refused", node, reasons=refused)
        else:
            _register(node, session, enrolment_quote, certificates, actor)
    if refused:  # raised after the commit, so the refusal and its reason are on record
        raise EnrolmentRefused(refused)
    node.refresh_from_db()
    return node


def _register(
    node: Node,
    session: EnrolmentSession,
    reported: InventoryQuote,
    certificates: dict[str, dict],
    actor: str,
) -> None:
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
        ak_certificates=certificates,
        inventory=reported.inventory,
        enrolment_quote=reported.evidence(),
    )
    publish_on_commit("node", name=node.name, trust=node.trust)
