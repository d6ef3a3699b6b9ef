"""EK binding on the ledger: a node's AK is accepted only as a key of a TPM whose EK chains to
an EK root both organisations approved (governance kind "ek_roots"), vouched for by the
registrar of every organisation (governance kind "registrars"), each after a credential
activation of its own.

RegisterNode's `ek_binding`:

    {"ek_public": b64 TPM2B_PUBLIC, "ek_certificate": b64 DER or PEM,
     "ek_intermediates": [b64 ...] (optional),
     "ak_certificates": {MSP id: {"ak_certificate": {"org", "node_id", "ak_name": hex,
                                                     "ek_name": hex, "activated_ns": int},
                                  "signature": b64 DER ECDSA-SHA256}}}

Each AK certificate is what that organisation's registrar (attest.registrar, a service the
organisation runs) signs once TPM2_ActivateCredential proved this AK (by name) lives in the
TPM of this EK; its signature is checked against the registrar key both organisations approved
for that organisation, never against a channel identity: the transaction's creator adds
nothing. Every organisation named in the approved registrars policy, and the node's own, must
have certified the same node, AK and EK. Every endorser checks the EK chain to an approved
root, the EK's attributes, the AK's restricted-signing attributes, the names, the node id and
each signature. Once the channel has approved EK roots, a node without a binding (a self-made
key with no activation) is refused.

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
from typing import Any

from cryptography import x509

from ledger.contract import args as args
from ledger.contract import governance, terms
from ledger.contract import quote as attestation
from ledger.contract.state import ContractError
from ledger.units import NS_PER_S

EK_ROOTS_KEY = governance.DEFAULT_KEY
REGISTRARS_KEY = governance.DEFAULT_KEY
MAX_INTERMEDIATES = 4


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
            "(ek_binding: EK certificate chain and every organisation registrar's AK certificate "
            "after its credential activation); a self-made key proves nothing",
        )
    if not isinstance(binding, dict):
        raise args.ArgumentError("ek_binding: must be an object")
    ek_name, ak_name = _check_tpm_keys(binding, roots, ak_public, now_ns)
    named = {"node_id": node_id, "ak_name": ak_name, "ek_name": ek_name}
    registrars = await _check_registrars(ctx, binding, named, args.identifier(req, "org"))
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
        "registrars": registrars,
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


async def _check_registrars(
    ctx: Any, binding: dict[str, Any], named: dict[str, str], org: str
) -> dict[str, int]:
    """{MSP id: activated_ns} once every required registrar certified this node's AK and EK:
    those of the approved registrars policy and the node's own organisation's."""
    from attest.registrar import RegistrarError, load_registrar_key, same_key, signed_by

    policy = await governance.approved_policy(
        ctx.get_stub(), governance.REGISTRARS_KIND, REGISTRARS_KEY
    )
    if policy is None:
        raise _refuse(
            "no_registrars",
            "the channel has approved no registrar keys (governance kind registrars): no AK "
            "certificate can be checked",
        )
    keys: dict[str, str] = policy["keys"]
    if org not in keys:
        raise _refuse(
            "registrar_missing", f"{org}, the node's organisation, has no approved registrar"
        )
    certificates = binding.get("ak_certificates")
    if not isinstance(certificates, dict) or len(certificates) > governance.MAX_REGISTRARS:
        raise args.ArgumentError(
            "ek_binding.ak_certificates: must be an object {MSP id: {ak_certificate, signature}}"
        )
    unknown = sorted(set(certificates) - set(keys))
    if unknown:
        raise _refuse(
            "registrar_unknown",
            f"ak_certificates of {unknown[0]!r}: not an organisation with an approved registrar",
        )
    missing = sorted(set(keys) - set(certificates))
    if missing:
        raise _refuse(
            "registrar_missing",
            f"no AK certificate from the registrar of {', '.join(missing)}: every organisation's "
            "registrar certifies a node after its own credential activation",
        )
    creator = x509.load_pem_x509_certificate(ctx.get_client_identity().get_x509()).public_key()
    activated: dict[str, int] = {}
    for mspid in sorted(keys):
        statement, signature = _ak_certificate_of(certificates[mspid], mspid)
        if statement["org"] != mspid:
            raise _refuse(
                "registrar_org_mismatch",
                f"ak_certificates.{mspid} is a certificate of {statement['org']!r}",
            )
        for field, want in named.items():
            if statement[field] != want:
                raise _refuse(
                    f"{field}_mismatch",
                    f"ak_certificates.{mspid}.{field} is {statement[field]!r}, the "
                    f"registration's is {want!r}",
                )
        try:
            key = load_registrar_key(keys[mspid])
        except RegistrarError as exc:  # approved through governance's own check: unreachable
            raise _refuse("registrar_signature", str(exc)) from None
        if same_key(creator, key):
            raise _refuse(
                "registrar_is_creator",
                f"{mspid}'s registrar key is this transaction's creator's: a registrar is never a "
                "channel identity",
            )
        if not signed_by(key, statement, signature):
            raise _refuse(
                "registrar_signature",
                f"ak_certificates.{mspid} is not signed by {mspid}'s approved registrar key",
            )
        activated[mspid] = statement["activated_ns"]
    return activated


def _ak_certificate_of(entry: object, mspid: str) -> tuple[dict[str, Any], bytes]:
    from attest.registrar import MAX_SIGNATURE_BYTES, STATEMENT_FIELDS

    where = f"ek_binding.ak_certificates.{mspid}"
    if not isinstance(entry, dict) or sorted(entry) != ["ak_certificate", "signature"]:
        raise args.ArgumentError(f"{where}: must be an object of ak_certificate, signature")
    statement = entry["ak_certificate"]
    if not isinstance(statement, dict) or sorted(statement) != list(STATEMENT_FIELDS):
        raise args.ArgumentError(
            f"{where}.ak_certificate: must be an object of {', '.join(STATEMENT_FIELDS)}"
        )
    for field in ("org", "node_id", "ak_name", "ek_name"):
        if not isinstance(statement[field], str):
            raise args.ArgumentError(f"{where}.ak_certificate.{field}: must be a string")
    args.integer(statement, "activated_ns", 0, 2**63 - 1)  # ns since the epoch
    return statement, args.b64bytes(entry, "signature", MAX_SIGNATURE_BYTES)


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
