# mypy: disable-error-code="attr-defined,name-defined"
# (fabric_protos ships py.typed but no stubs for its generated _pb2 modules)
"""A Fabric channel's trust roots as an auditor holds them, and identity checks against them.

The roots never come from the thing being checked: an auditor gets them from the channel's
operators (`python -m chaincode_client.fabric_network roots`) and names them on the command
line. The file is a PEM bundle; before each certificate a line says whose root it is:

    channel wattlease
    chaincode wattlease
    orderer OrdererMSP
    -----BEGIN CERTIFICATE-----
    ...
    org Org1MSP
    -----BEGIN CERTIFICATE-----
    ...

`orderer` roots may sign blocks; `org` roots issue clients and peers, and the contract's
endorsement policy is a peer of *every* `org` MSP named (AND(Org1MSP.peer, Org2MSP.peer)).
`channel` and `chaincode` (optional) name the channel and the Wattlease contract's chaincode:
a receipt of another channel, or of another chaincode on it, then fails.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID
from fabric_protos.msp import identities_pb2

from ledger.audit.certs import CertificateDefect, read_certificate
from ledger.audit.fabric_block import BlockFormatError, parse

MAX_ROOTS_BYTES = 1024 * 1024
MAX_CERT_BYTES = 64 * 1024
# A receipt names the same few signers again and again (the orderer on every block, each
# peer on every transaction): certificates and their issuance are checked once per process.
CERT_CACHE_SIZE = 1024
PEM_BEGIN = "-----BEGIN CERTIFICATE-----"
PEM_END = "-----END CERTIFICATE-----"
ROLE_ORDERER, ROLE_ORG = "orderer", "org"
# Fabric accepts only low-S ECDSA signatures (s <= n/2), so a signature has one encoding.
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


class RootsError(ValueError):
    """The trust roots file is unusable; the message names the line and the rule."""


class IdentityDefect(ValueError):
    """An identity or signature failed a check; the message says which."""


@dataclass(frozen=True)
class TrustRoots:
    channel: str | None = None
    chaincode: str | None = None
    orderers: dict[str, list[x509.Certificate]] = field(default_factory=dict)
    orgs: dict[str, list[x509.Certificate]] = field(default_factory=dict)


def _load_cert(pem: str, where: str) -> x509.Certificate:
    try:
        cert = read_certificate(pem.encode())
    except CertificateDefect as exc:
        raise RootsError(f"{where}: {exc}") from None
    subject = cert.subject.rfc4514_string()
    constraints = _basic_constraints(cert)
    if constraints is None or not constraints.ca:
        raise RootsError(f"{where}: {subject} is not a CA certificate")
    return cert


def parse_roots(data: bytes, need_orderer: bool = True) -> TrustRoots:
    """The roots in a bundle written by `format_roots` (or by hand, in the same shape)."""
    if len(data) > MAX_ROOTS_BYTES:
        raise RootsError(f"trust roots: {len(data)} bytes, more than {MAX_ROOTS_BYTES}")
    groups: dict[str, dict[str, list[x509.Certificate]]] = {ROLE_ORDERER: {}, ROLE_ORG: {}}
    named: dict[str, str] = {}
    owner: tuple[str, str] | None = None
    pem: list[str] | None = None
    for number, line in enumerate(data.decode(errors="replace").splitlines(), 1):
        line = line.strip()
        where = f"trust roots line {number}"
        if pem is not None:
            pem.append(line)
            if line == PEM_END:
                assert owner is not None  # a PEM block is only opened after its owner line
                role, msp_id = owner
                groups[role].setdefault(msp_id, []).append(_load_cert("\n".join(pem), where))
                pem, owner = None, None
            continue
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if line == PEM_BEGIN:
            if owner is None:
                raise RootsError(f"{where}: certificate without an `orderer MSP` / `org MSP` line")
            pem = [line]
        elif len(words) == 2 and words[0] in ("channel", "chaincode"):
            named[words[0]] = words[1]
        elif len(words) == 2 and words[0] in (ROLE_ORDERER, ROLE_ORG):
            owner = (words[0], words[1])
        else:
            raise RootsError(
                f"{where}: expected `channel NAME`, `chaincode NAME`, `orderer MSP` or `org MSP`"
            )
    if pem is not None:
        raise RootsError("trust roots: a certificate is not closed by " + PEM_END)
    orderers, orgs = groups[ROLE_ORDERER], groups[ROLE_ORG]
    if not orgs or (need_orderer and not orderers):
        need = "one `orderer` and one `org` root" if need_orderer else "one `org` root"
        raise RootsError(f"trust roots: need at least {need}")
    both = sorted(set(orderers) & set(orgs))
    if both:
        raise RootsError(f"trust roots: {both} named both `orderer` and `org`")
    return TrustRoots(named.get("channel"), named.get("chaincode"), orderers, orgs)


def format_roots(
    channel: str, chaincode: str, orderers: dict[str, bytes], orgs: dict[str, bytes]
) -> str:
    """A bundle `parse_roots` reads: each MSP id's root CA certificate (PEM) with its role."""
    lines = [
        f"# trust roots of Fabric channel {channel}",
        f"channel {channel}",
        f"chaincode {chaincode}",
    ]
    for role, group in ((ROLE_ORDERER, orderers), (ROLE_ORG, orgs)):
        for msp_id, pem in sorted(group.items()):
            lines += [f"{role} {msp_id}", pem.decode().strip()]
    return "\n".join(lines) + "\n"


def _basic_constraints(cert: x509.Certificate) -> x509.BasicConstraints | None:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except (x509.ExtensionNotFound, ValueError):
        return None


@dataclass(frozen=True)
class Signer:
    msp_id: str
    cert: x509.Certificate

    @property
    def roles(self) -> list[str]:
        """The NodeOU roles in the subject's OU (peer, client, admin, orderer)."""
        return [
            str(a.value)
            for a in self.cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
        ]


def identity(
    serialized: bytes, roots: dict[str, list[x509.Certificate]], at_ns: int | None = None
) -> Signer:
    """The signer a serialized identity names, if its certificate was issued by a root of
    the MSP it claims (and was valid at `at_ns`); IdentityDefect otherwise."""
    try:
        return _identity(serialized, roots, at_ns)
    except (ValueError, TypeError, UnsupportedAlgorithm, OverflowError) as exc:
        if isinstance(exc, IdentityDefect):
            raise
        raise IdentityDefect(f"identity: unusable certificate ({exc})") from None


def _identity(
    serialized: bytes, roots: dict[str, list[x509.Certificate]], at_ns: int | None
) -> Signer:
    try:
        ident = parse(identities_pb2.SerializedIdentity, serialized, "identity")
    except BlockFormatError as exc:
        raise IdentityDefect(str(exc)) from None
    msp_id = str(ident.mspid)
    if len(ident.id_bytes) > MAX_CERT_BYTES:
        raise IdentityDefect(f"identity of {msp_id!r}: certificate over {MAX_CERT_BYTES} bytes")
    try:
        cert = _load_pem(bytes(ident.id_bytes))
    except CertificateDefect as exc:
        raise IdentityDefect(f"identity of {msp_id!r}: {exc}") from None
    anchors = roots.get(msp_id)
    if not anchors:
        raise IdentityDefect(f"identity of MSP {msp_id!r}: no trust root given for that MSP")
    subject = cert.subject.rfc4514_string()
    if not any(_issued_by(cert, root) for root in anchors):
        raise IdentityDefect(f"{msp_id} identity {subject}: not issued by {msp_id}'s trust root")
    if at_ns is not None:
        at = dt.datetime.fromtimestamp(at_ns / 1e9, dt.UTC)
        if not cert.not_valid_before_utc <= at <= cert.not_valid_after_utc:
            raise IdentityDefect(f"{msp_id} identity {subject}: certificate not valid at {at}")
    return Signer(msp_id, cert)


def clear_cert_caches() -> None:
    """Forget every certificate checked so far (for measuring a cold start)."""
    _load_pem.cache_clear()
    _issued_by.cache_clear()


@functools.lru_cache(maxsize=CERT_CACHE_SIZE)
def _load_pem(pem: bytes) -> x509.Certificate:
    return read_certificate(pem)


@functools.lru_cache(maxsize=CERT_CACHE_SIZE)
def _issued_by(cert: x509.Certificate, root: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(root)
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True


def check_signature(signer: Signer, data: bytes, signature: bytes, what: str) -> None:
    """ECDSA with SHA-256 by the signer's key, low-S as Fabric requires."""
    try:
        key = signer.cert.public_key()
    except (ValueError, UnsupportedAlgorithm):
        raise IdentityDefect(f"{what}: {signer.msp_id} key is unreadable") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise IdentityDefect(f"{what}: {signer.msp_id} key is not ECDSA")
    try:
        _, s = decode_dss_signature(signature)
        if isinstance(key.curve, ec.SECP256R1) and s > P256_ORDER // 2:
            raise IdentityDefect(f"{what}: signature by {signer.msp_id} is not low-S")
        key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError) as exc:
        if isinstance(exc, IdentityDefect):
            raise
        raise IdentityDefect(f"{what}: signature by {signer.msp_id} does not verify") from None
