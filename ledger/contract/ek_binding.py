"""EK binding on the ledger: a node's AK is accepted only as a key of a TPM whose EK chains to
an EK root both organisations approved (governance kind "ek_roots"), vouched for by the
registering organisation's registrar after credential activation.

RegisterNode's `ek_binding`:

    {"ek_public": b64 TPM2B_PUBLIC, "ek_certificate": b64 DER or PEM,
     "ek_intermediates": [b64 ...] (optional),
     "ak_certificate": {"node_id", "ak_name": hex, "ek_name": hex, "activated_ns": int},
     "registrar_signature": b64 DER ECDSA-SHA256 over the canonical JSON of ak_certificate}

The registrar is the transaction's creator: a channel identity of the node's organisation,
whose certificate the endorsing peer's MSP has checked; its signature says that TPM2_
ActivateCredential proved this AK (by name) lives in the TPM of this EK. Every endorser checks
the EK chain to an approved root, the EK's attributes, the AK's restricted-signing attributes,
the names, the node id and the signature. Once the channel has approved EK roots, a node
without a binding (a self-made key with no activation) is refused.

With the binding comes `enrolment_quote`: the AK's quote over the node's GPU inventory (NVML
uuid, product name, serial; attest.inventory). The registered GPUs must be the reported ones,
and each one's generation must be one whose catalogue entry lists the name the GPU reported
(`nvml_names`, ledger/data/catalogue-v1.json): an A100 cannot be registered as an H100
(`[enrol.generation_mismatch]`).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from collections.abc import Callable
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from ledger.canonical import dumps
from ledger.contract import args as args
from ledger.contract import governance, terms
from ledger.contract import quote as attestation
from ledger.contract.state import ContractError
from ledger.units import NS_PER_S

EK_ROOTS_KEY = governance.DEFAULT_KEY
ECDSA_SHA256 = ec.ECDSA(hashes.SHA256())
MAX_INTERMEDIATES = 4
AK_CERTIFICATE_FIELDS = ("node_id", "ak_name", "ek_name", "activated_ns")


def ak_certificate(node_id: str, ak_name: bytes, ek_name: bytes, activated_ns: int) -> dict:
    """The statement a registrar signs once ActivateCredential has succeeded."""
    return {
        "node_id": node_id,
        "ak_name": ak_name.hex(),
        "ek_name": ek_name.hex(),
        "activated_ns": activated_ns,
    }


def sign_ak_certificate(certificate: dict, sign: Callable[[bytes], bytes]) -> str:
    """The registrar's signature (`sign`: ECDSA-SHA256, DER) over the canonical JSON."""
    return base64.b64encode(sign(dumps(certificate))).decode()


def _refuse(code: str, detail: str) -> ContractError:
    return ContractError(f"[enrol.{code}] {detail}")


async def check(
    ctx: Any,
    req: dict[str, Any],
    node_id: str,
    ak_public: bytes,
    now_ns: int,
    gpus: list[dict[str, str]],
    policy: dict[str, Any],
) -> Any:
    """The binding record to store with the node, None when the channel has no EK roots yet
    and none was given; otherwise a ContractError naming the first check that failed."""
    stub = ctx.get_stub()
    roots = await governance.approved_policy(stub, "ek_roots", EK_ROOTS_KEY)
    binding = req.get("ek_binding")
    if roots is None:
        if binding is not None:
            raise _refuse("no_ek_roots", "the channel has approved no EK roots to check it with")
        return None
    if binding is None:
        raise _refuse(
            "no_ek_binding",
            f"node {node_id}: this channel registers only AKs bound to a certified EK "
            "(ek_binding: EK certificate chain and the registrar's AK certificate after "
            "credential activation); a self-made key proves nothing",
        )
    if not isinstance(binding, dict):
        raise args.ArgumentError("ek_binding: must be an object")
    ek_name, ak_name = _check_tpm_keys(binding, roots, ak_public, now_ns)
    cert = _ak_certificate_of(binding)
    for field, want in (("node_id", node_id), ("ak_name", ak_name), ("ek_name", ek_name)):
        if cert[field] != want:
            raise _refuse(
                f"{field}_mismatch",
                f"ak_certificate.{field} is {cert[field]!r}, the registration's is {want!r}",
            )
    registrar = _check_registrar(ctx, cert, binding)
    inventory = check_inventory(req, node_id, ak_public, gpus, policy)
    mismatched = terms.reported_generation_mismatches(await terms.rate_card(stub), gpus, inventory)
    if mismatched:
        raise _refuse(
            "generation_mismatch",
            "registered generations differ from what the node's GPUs report: "
            + "; ".join(mismatched),
        )
    return {
        "ek_name": ek_name,
        "registrar": registrar,
        "activated_ns": cert["activated_ns"],
        "inventory": inventory,
    }


def check_inventory(
    req: dict[str, Any],
    node_id: str,
    ak_public: bytes,
    gpus: list[dict[str, str]],
    policy: dict[str, Any],
) -> list[dict[str, str]]:
    """The GPUs registered are those the node reported in its enrolment quote: the
    inventory's uuids are the registration's, and the AK signed a quote whose qualifying
    data is the inventory's digest (attest.inventory). Returns the inventory to record."""
    from attest.inventory import inventory_digest

    enrolment = req.get("enrolment_quote")
    if not isinstance(enrolment, dict):
        raise _refuse(
            "no_enrolment_quote",
            "an EK-bound registration carries enrolment_quote {quote, signature, pcr_values, "
            "inventory}: the node's quote over its GPU inventory",
        )
    inventory = _inventory_of(enrolment)
    reported = sorted(g["uuid"] for g in inventory)
    registered = sorted(g["uuid"] for g in gpus)
    if reported != registered:
        raise _refuse(
            "inventory_mismatch",
            f"GPUs registered {registered} are not the GPUs the node reported {reported}",
        )
    try:
        digest = inventory_digest(node_id, inventory)
    except ValueError as exc:
        raise args.ArgumentError(f"enrolment_quote.inventory: {exc}") from None
    verdict = attestation.verify(
        ak_public,
        args.b64bytes(enrolment, "quote"),
        args.b64bytes(enrolment, "signature"),
        args.pcr_values(enrolment),
        digest,
        policy,
        None,
    )
    codes = [r["code"] for r in verdict["reasons"] if r["severity"] == "error"]
    if "nonce_mismatch" in codes:
        raise _refuse(
            "inventory_mismatch",
            "the inventory does not hash to the enrolment quote's qualifying data: the node "
            "reported other GPUs (or the quote is for another enrolment)",
        )
    if not verdict["valid"]:
        raise _refuse("enrolment_quote_invalid", f"the enrolment quote fails: {', '.join(codes)}")
    return inventory


def _inventory_of(enrolment: dict[str, Any]) -> list[dict[str, str]]:
    """Shape only: attest.inventory.inventory_digest checks each field's value."""
    from attest.inventory import INVENTORY_FIELDS

    items = enrolment.get("inventory")
    if not isinstance(items, list) or not 1 <= len(items) <= args.MAX_LIST_ITEMS:
        raise args.ArgumentError(f"enrolment_quote.inventory: must list 1-{args.MAX_LIST_ITEMS}")
    for i, item in enumerate(items):
        if not isinstance(item, dict) or sorted(item) != sorted(INVENTORY_FIELDS):
            raise args.ArgumentError(
                f"enrolment_quote.inventory[{i}]: must be an object of uuid, name, serial"
            )
    return sorted((dict(item) for item in items), key=lambda g: str(g["uuid"]))


def _check_tpm_keys(
    binding: dict[str, Any], roots: dict[str, Any], ak_public: bytes, now_ns: int
) -> tuple[str, str]:
    """(EK name, AK name) in hex, once the EK chains to an approved root and both keys have
    the attributes of a real EK and a restricted signing AK."""
    from attest import tpm_constants as C
    from attest.enrol import check_ek
    from attest.public import parse_public

    certs = [x509.load_pem_x509_certificate(pem.encode()) for pem in roots["certificates"]]
    trusted = [c for c in certs if c.issuer == c.subject]
    intermediates = [c for c in certs if c.issuer != c.subject] + [
        _load_der_or_pem(data, "ek_binding.ek_intermediates")
        for data in _b64_list(binding, "ek_intermediates")
    ]
    now = dt.datetime.fromtimestamp(now_ns / NS_PER_S, dt.UTC)
    ek, reasons = check_ek(
        args.b64bytes(binding, "ek_public"),
        args.b64bytes(binding, "ek_certificate", 8192),
        trusted,
        intermediates,
        now,
    )
    if reasons or ek is None:
        first = reasons[0]
        raise _refuse(first.code, first.detail)
    ak = parse_public(ak_public)
    if not ak.has_attributes(C.AK_REQUIRED_ATTRS) or ak.has_attributes(C.ATTR_DECRYPT):
        raise _refuse(
            "ak_not_restricted_signing_key",
            f"AK attributes {ak.attributes:#010x}: not a restricted, fixedTPM signing key",
        )
    return ek.name().hex(), ak.name().hex()


def _ak_certificate_of(binding: dict[str, Any]) -> dict[str, Any]:
    cert = binding.get("ak_certificate")
    if not isinstance(cert, dict) or sorted(cert) != sorted(AK_CERTIFICATE_FIELDS):
        raise args.ArgumentError(
            f"ek_binding.ak_certificate: must be an object of {', '.join(AK_CERTIFICATE_FIELDS)}"
        )
    args.integer(cert, "activated_ns", 0, 2**63 - 1)  # ns since the epoch
    return cert


def _check_registrar(ctx: Any, cert: dict[str, Any], binding: dict[str, Any]) -> str:
    """The creator signed the AK certificate: the registrar is a channel identity."""
    signature = args.b64bytes(binding, "registrar_signature", 256)
    creator = x509.load_pem_x509_certificate(ctx.get_client_identity().get_x509())
    key = creator.public_key()
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise _refuse("registrar_signature", "the registrar's key is not an EC key")
    try:
        key.verify(signature, dumps(cert), ECDSA_SHA256)
    except InvalidSignature:
        raise _refuse(
            "registrar_signature",
            "ak_certificate is not signed by this transaction's creator (the registrar)",
        ) from None
    return creator.subject.rfc4514_string()


def _b64_list(binding: dict[str, Any], field: str) -> list[bytes]:
    values = binding.get(field, [])
    if not isinstance(values, list) or len(values) > MAX_INTERMEDIATES:
        raise args.ArgumentError(f"ek_binding.{field}: must list at most {MAX_INTERMEDIATES}")
    try:
        return [base64.b64decode(v, validate=True) for v in values]
    except (binascii.Error, ValueError, TypeError):
        raise args.ArgumentError(f"ek_binding.{field}: items must be base64") from None


def _load_der_or_pem(data: bytes, what: str) -> x509.Certificate:
    from attest.enrol import load_certificate
    from attest.errors import EnrolmentError

    try:
        return load_certificate(data, what)
    except EnrolmentError as exc:
        raise args.ArgumentError(str(exc)) from None
