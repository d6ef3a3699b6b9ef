"""Membership: each organisation's CA, its endorsing peer's key, client identities.

Every organisation has a self-signed ECDSA P-256 CA; its peer, its clients and its admins get
X.509 certificates issued by that CA, their role (NodeOU) in the subject's OU as Fabric's
cryptogen writes it: OU=peer, OU=client, OU=admin. Keys are generated at init into the
ledger's data directory (mode 0600) and never enter the repository. Validation trusts exactly
the CA certificates in the genesis block.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ledger.audit.certs import CertificateDefect, read_certificate

CERT_VALIDITY_DAYS = 3650
ECDSA_SHA256 = ec.ECDSA(hashes.SHA256())
MAX_CERT_PEM_BYTES = 4096
_CERT_CACHE_LIMIT = 10_000  # validated certificates kept; clients reuse one cert per identity
# Fabric's NodeOU roles, written as the certificate subject's OU (cryptogen with NodeOUs)
ROLE_CLIENT, ROLE_PEER, ROLE_ADMIN = "client", "peer", "admin"
ROLES = (ROLE_CLIENT, ROLE_PEER, ROLE_ADMIN)
PRIVATE_DIR_MODE = 0o700  # each organisation's folder; key files inside are 0600


class MspError(ValueError):
    """A certificate or signature does not belong to a channel organisation."""


@dataclass(frozen=True)
class Identity:
    """A client or peer identity: MSP id, X.509 certificate (PEM) and private key."""

    mspid: str
    cert_pem: bytes
    key: ec.EllipticCurvePrivateKey

    def sign(self, data: bytes) -> bytes:
        return self.key.sign(data, ECDSA_SHA256)

    def save(self, directory: Path) -> None:
        _private_dir(directory)
        (directory / "mspid").write_text(self.mspid)
        (directory / "cert.pem").write_bytes(self.cert_pem)
        _write_private(directory / "key.pem", _key_pem(self.key))

    @classmethod
    def load(cls, directory: Path) -> Identity:
        key = serialization.load_pem_private_key((directory / "key.pem").read_bytes(), None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise MspError(f"{directory}/key.pem is not an EC private key")
        return cls(
            (directory / "mspid").read_text().strip(), (directory / "cert.pem").read_bytes(), key
        )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _private_dir(directory: Path) -> None:
    """A folder only its owner can enter: one organisation's keys are not another's to read
    (run each organisation's peer as its own user to make that hold between them)."""
    directory.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    directory.chmod(PRIVATE_DIR_MODE)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _name(mspid: str, common_name: str, role: str | None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, mspid)]
    if role is not None:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role))
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def issue_cert(
    subject_key: ec.EllipticCurvePrivateKey,
    mspid: str,
    common_name: str,
    ca: Identity | None,
    role: str | None = None,
) -> bytes:
    """A certificate for subject_key issued by ca (self-signed when ca is None). `role` is the
    NodeOU (subject OU: client, peer or admin), as Fabric's cryptogen writes it."""
    if role is not None and role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    now = datetime.datetime.now(datetime.UTC)
    subject = _name(mspid, common_name, role)
    issuer_name = subject if ca is None else x509.load_pem_x509_certificate(ca.cert_pem).subject
    signing_key = subject_key if ca is None else ca.key
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(subject_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CERT_VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=ca is None, path_length=None), critical=True)
        .sign(signing_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def new_identity(
    mspid: str, common_name: str, ca: Identity | None, role: str | None = None
) -> Identity:
    key = ec.generate_private_key(ec.SECP256R1())
    return Identity(mspid, issue_cert(key, mspid, common_name, ca, role), key)


@dataclass
class OrgMaterial:
    """What an organisation keeps in the data directory: its CA and its endorsing peer."""

    ca: Identity
    peer: Identity

    @classmethod
    def create(cls, directory: Path, mspid: str) -> OrgMaterial:
        _private_dir(directory)
        ca = new_identity(mspid, f"ca.{mspid}", None)
        peer = new_identity(mspid, f"peer0.{mspid}", ca, ROLE_PEER)
        ca.save(directory / "ca")
        peer.save(directory / "peer")
        return cls(ca, peer)

    @classmethod
    def load(cls, directory: Path) -> OrgMaterial:
        return cls(Identity.load(directory / "ca"), cls.load_peer(directory))

    @staticmethod
    def load_peer(directory: Path) -> Identity:
        """Only the peer's identity: what an organisation's peer process needs, and all it
        reads (never its CA key, never another organisation's folder)."""
        return Identity.load(directory / "peer")


def org_ca_certs(msp_dir: Path) -> dict[str, bytes]:
    """Each organisation's CA certificate (PEM; never its key) from its own folder under
    `msp_dir` (`<ledger>.msp/<MSPID>/ca/cert.pem`): the roots an auditor of this ledger gets
    from the organisations, not from a receipt or the genesis block."""
    return {org.name: (org / "ca" / "cert.pem").read_bytes() for org in sorted(msp_dir.iterdir())}


class ChannelMsp:
    """Verifies that a certificate was issued by a channel organisation's CA and checks
    signatures with it. Certificates are checked once and cached by their PEM bytes."""

    def __init__(self, ca_certs: dict[str, bytes]) -> None:
        self._cas = {mspid: x509.load_pem_x509_certificate(pem) for mspid, pem in ca_certs.items()}
        self._keys: dict[tuple[str, bytes], ec.EllipticCurvePublicKey] = {}

    @property
    def mspids(self) -> list[str]:
        return sorted(self._cas)

    def public_key(self, mspid: str, cert_pem: bytes) -> ec.EllipticCurvePublicKey:
        cached = self._keys.get((mspid, cert_pem))
        if cached is not None:
            return cached
        ca = self._cas.get(mspid)
        if ca is None:
            raise MspError(f"MSP {mspid!r} is not a channel organisation")
        if len(cert_pem) > MAX_CERT_PEM_BYTES:
            raise MspError(f"certificate of {mspid} is {len(cert_pem)} bytes")
        try:
            cert = read_certificate(cert_pem)
        except CertificateDefect as exc:
            raise MspError(f"certificate of {mspid} does not parse: {exc}") from None
        key = cert.public_key()
        ca_key = ca.public_key()
        if cert.issuer != ca.subject or not isinstance(key, ec.EllipticCurvePublicKey):
            raise MspError(f"certificate {cert.subject.rfc4514_string()} not issued by {mspid}")
        if not isinstance(ca_key, ec.EllipticCurvePublicKey):
            raise MspError(f"CA of {mspid} does not have an EC key")
        try:
            ca_key.verify(cert.signature, cert.tbs_certificate_bytes, ECDSA_SHA256)
        except InvalidSignature:
            raise MspError(
                f"certificate {cert.subject.rfc4514_string()} has a bad CA signature for {mspid}"
            ) from None
        if len(self._keys) >= _CERT_CACHE_LIMIT:
            self._keys.clear()
        self._keys[(mspid, cert_pem)] = key
        return key

    def verify(self, mspid: str, cert_pem: bytes, signature: bytes, data: bytes) -> None:
        """Raise MspError unless signature over data is by the holder of cert_pem (of mspid)."""
        key = self.public_key(mspid, cert_pem)
        try:
            key.verify(signature, data, ECDSA_SHA256)
        except InvalidSignature:
            raise MspError(f"bad signature by a {mspid} identity") from None
