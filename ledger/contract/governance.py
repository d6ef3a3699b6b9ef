"""Policies both organisations decide: PCR golden values, accepted EK roots, registrar keys,
the catalogue and the tariffs change only by one organisation admin's proposal and another
organisation admin's approval (two transactions, two identities, two organisations).

"Admin" is Fabric's NodeOU convention: the creator certificate's subject carries OU=admin
(cryptogen with NodeOUs issues Admin@org so; clients get OU=client, peers OU=peer). The
endorser (the embedded MSP or Fabric's) has already checked that the certificate was issued by
the creator organisation's CA, so only that CA can make an admin of it. Read through the shim's
creator only, so the rules hold on every backend.

Other contract code reads decisions with `approved_policy(stub, kind, key)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import NameOID

from ledger.contract import args as args
from ledger.contract.state import ContractError, get_json
from ledger.contract.terms import RATE_CARD_KIND, rate_card_of

POLICY = "policy:"  # policy:{kind}:{key} -> the approved document and who decided it
PROPOSAL = "proposal:"  # proposal:{tx id} -> a proposed change, open until approved
ADMIN_OU = "admin"
DEFAULT_KEY = "default"
MAX_EK_ROOTS = 32
MAX_CERT_PEM_BYTES = 8192
REGISTRARS_KIND = "registrars"
MAX_REGISTRARS = 16  # organisations of one channel


def _pcr_policy(document: dict[str, Any]) -> dict[str, Any]:
    return args.pcr_policy({"document": document}, "document")


def _ek_roots(document: dict[str, Any]) -> dict[str, Any]:
    """{certificates: [PEM]}: manufacturer roots and intermediates, each a CA certificate."""
    pems = document.get("certificates")
    if not isinstance(pems, list) or not 1 <= len(pems) <= MAX_EK_ROOTS:
        raise args.ArgumentError(f"document.certificates: must list 1-{MAX_EK_ROOTS} PEM certs")
    for i, pem in enumerate(pems):
        where = f"document.certificates[{i}]"
        if not isinstance(pem, str) or len(pem) > MAX_CERT_PEM_BYTES:
            raise args.ArgumentError(f"{where}: must be a PEM string of <= {MAX_CERT_PEM_BYTES}")
        try:
            cert = x509.load_pem_x509_certificate(pem.encode())
            ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except (ValueError, x509.ExtensionNotFound) as exc:
            raise args.ArgumentError(f"{where}: not a CA certificate: {exc}") from None
        if not ca:
            raise args.ArgumentError(f"{where}: BasicConstraints says it is not a CA")
    return {"certificates": list(pems)}


def _registrars(document: dict[str, Any]) -> dict[str, Any]:
    """{keys: {MSP id: registrar public key}}: each organisation's registrar key (EC P-256,
    base64 DER SubjectPublicKeyInfo; attest.registrar), one key per organisation."""
    from attest.registrar import RegistrarError, load_registrar_key

    keys = document.get("keys")
    if (
        not isinstance(keys, dict)
        or not 1 <= len(keys) <= MAX_REGISTRARS
        or set(document) != {"keys"}
    ):
        raise args.ArgumentError(
            f"document: must be {{keys: {{MSP id: registrar key}}}} of 1-{MAX_REGISTRARS} orgs"
        )
    seen: dict[tuple[int, int], str] = {}
    for mspid, text in keys.items():
        args.identifier({"MSP id": mspid}, "MSP id")
        try:
            numbers = load_registrar_key(text, f"document.keys.{mspid}").public_numbers()
        except RegistrarError as exc:
            raise args.ArgumentError(f"[governance.registrar_key] {exc}") from None
        if (numbers.x, numbers.y) in seen:
            raise args.ArgumentError(
                f"[governance.registrar_key_shared] document.keys: {mspid} and "
                f"{seen[(numbers.x, numbers.y)]} name one key; each organisation's registrar "
                "has its own"
            )
        seen[(numbers.x, numbers.y)] = mspid
    return {"keys": dict(keys)}


def check_decision(ctx: Any, kind: str, document: dict[str, Any], orgs: list[str]) -> None:
    """What a kind requires of those deciding it. Registrars: no registrar key is the key of
    the admin proposing or approving it (a registrar is never a channel identity: the contract
    sees no other identity's key here, docs/threat-model.md), and the document names a key for
    each organisation deciding it (`orgs`: the proposer's, then the approver's too)."""
    if kind != REGISTRARS_KIND:
        return
    from attest.registrar import load_registrar_key, same_key

    creator = x509.load_pem_x509_certificate(ctx.get_client_identity().get_x509()).public_key()
    for mspid, text in document["keys"].items():
        if same_key(creator, load_registrar_key(text)):
            raise ContractError(
                f"[governance.registrar_is_identity] document.keys.{mspid} is the key of this "
                "transaction's creator: a registrar key is never a channel identity's"
            )
    missing = [org for org in orgs if org not in document["keys"]]
    if missing:
        raise ContractError(
            f"[governance.registrars_incomplete] document.keys names no registrar of "
            f"{', '.join(missing)}: every organisation deciding it runs one"
        )


def _object(document: dict[str, Any]) -> dict[str, Any]:
    """Catalogue and tariffs: stored as given (issue 11's code reads and checks them)."""
    return document


def _rate_card(document: dict[str, Any]) -> dict[str, Any]:
    """{rate_card, catalogue}: a rate card (the object of ledger/data/rate-card-v1.json) and
    the text of the generation catalogue it prices (a file like ledger/data/catalogue-v1.json);
    in force for every lease's terms once approved (ledger.contract.terms.rate_card)."""
    try:
        rate_card_of(document.get("rate_card"), document.get("catalogue"), "document")
    except ValueError as exc:
        raise args.ArgumentError(str(exc)) from None
    return {"rate_card": document["rate_card"], "catalogue": document["catalogue"]}


VALIDATORS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "pcr_policy": _pcr_policy,
    "ek_roots": _ek_roots,
    "catalogue": _object,
    "tariffs": _object,
    RATE_CARD_KIND: _rate_card,
    REGISTRARS_KIND: _registrars,
}


def kind_of(req: dict[str, Any]) -> str:
    kind = req.get("kind")
    if not isinstance(kind, str) or kind not in VALIDATORS:  # a list or object: unhashable
        raise args.ArgumentError(f"kind: must be one of {sorted(VALIDATORS)}, got {kind!r}")
    return str(kind)


def key_of(req: dict[str, Any]) -> str:
    return args.identifier({"key": req.get("key", DEFAULT_KEY)}, "key")


def document_of(req: dict[str, Any], kind: str) -> dict[str, Any]:
    document = req.get("document")
    if not isinstance(document, dict):
        raise args.ArgumentError("document: must be a JSON object")
    return VALIDATORS[kind](document)


def policy_key(kind: str, key: str) -> str:
    return f"{POLICY}{kind}:{key}"


async def approved_policy(stub: Any, kind: str, key: str = "") -> dict[str, Any] | None:
    """The document both organisations approved for (kind, key), or None if there is none."""
    record = await get_json(stub, policy_key(kind, key or DEFAULT_KEY))
    return None if record is None else dict(record["document"])


def admin_of(ctx: Any) -> dict[str, str]:
    """{mspid, subject, cert_sha256} of the creator if its certificate says OU=admin."""
    identity = ctx.get_client_identity()
    mspid = identity.get_mspid()
    try:
        cert = x509.load_pem_x509_certificate(identity.get_x509())
    except Exception as exc:  # the shim raises a bare Exception when there is no certificate
        raise ContractError(f"[governance.not_admin] unreadable creator cert: {exc}") from None
    ous = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    units = [str(a.value) for a in ous]
    subject = cert.subject.rfc4514_string()
    if ADMIN_OU not in units:
        raise ContractError(
            f"[governance.not_admin] {subject} of {mspid} is not an admin "
            f"(OU={','.join(units) or 'none'}): only an organisation's admin may propose or "
            "approve a policy"
        )
    fingerprint = cert.fingerprint(hashes.SHA256()).hex()
    return {"mspid": mspid, "subject": subject, "cert_sha256": fingerprint}


def check_approver(proposal: dict[str, Any], approver: dict[str, str]) -> None:
    """The approver is another organisation's admin: never the proposer, never its org."""
    proposer = proposal["proposed_by"]
    if proposer == approver:
        raise ContractError(
            f"[governance.self_approval] {approver['subject']} proposed {proposal['proposal_id']}"
            " and cannot approve it: another organisation's admin must"
        )
    if proposer["mspid"] == approver["mspid"]:
        raise ContractError(
            f"[governance.same_org] {proposal['proposal_id']} was proposed by {proposer['mspid']};"
            f" an admin of another organisation must approve it, not {approver['mspid']}"
        )
