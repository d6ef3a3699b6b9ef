# mypy: disable-error-code="attr-defined,name-defined"
# (fabric_protos ships py.typed but no stubs for its generated _pb2 modules)
"""Client identity from an MSP folder (signcerts/ + keystore/) and Fabric-style signing.

Fabric peers reject ECDSA signatures whose S is in the upper half of the curve order (an
attacker could otherwise flip S and get a second valid signature, i.e. a malleable tx), so
every signature is normalised to low S before it leaves the client.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)
from fabric_protos.msp import identities_pb2

from attest.files import TooLarge, read_bounded

# Order n of the NIST P-256 group (FIPS 186-4, D.1.2.3).
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
P256_HALF_ORDER = P256_ORDER >> 1
# A certificate or key file is a few hundred bytes; anything past this is not one.
MAX_PEM_BYTES = 64 * 1024
MAX_MSP_ID_CHARS = 128


class IdentityError(ValueError):
    """The MSP folder does not hold one usable P-256 certificate and its private key."""


@dataclass(frozen=True)
class Identity:
    msp_id: str
    cert_pem: bytes

    def serialized(self) -> bytes:
        """The `SerializedIdentity` Fabric puts in every header as the creator."""
        return identities_pb2.SerializedIdentity(
            mspid=self.msp_id, id_bytes=self.cert_pem
        ).SerializeToString()


def to_low_s(der_signature: bytes) -> bytes:
    """Return the same ECDSA signature with S in the lower half of the P-256 order."""
    r, s = decode_dss_signature(der_signature)
    if s > P256_HALF_ORDER:
        s = P256_ORDER - s
    return encode_dss_signature(r, s)


class Signer:
    """Signs messages with SHA-256 + ECDSA P-256, always low-S."""

    def __init__(self, key: ec.EllipticCurvePrivateKey) -> None:
        if not isinstance(key.curve, ec.SECP256R1):
            raise IdentityError(f"private key is on curve {key.curve.name}, expected secp256r1")
        self._key = key

    def sign(self, message: bytes) -> bytes:
        return to_low_s(self._key.sign(message, ec.ECDSA(hashes.SHA256())))

    def public_key(self) -> ec.EllipticCurvePublicKey:
        return self._key.public_key()


def _read_pem(path: Path) -> bytes:
    try:
        return read_bounded(path, MAX_PEM_BYTES)
    except TooLarge as exc:
        raise IdentityError(f"{exc}: not a PEM file") from None


def _only_file(folder: Path, what: str) -> Path:
    if not folder.is_dir():
        raise IdentityError(f"{folder} is missing: an MSP folder needs {folder.name}/")
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    if len(files) != 1:
        names = ", ".join(p.name for p in files) or "none"
        raise IdentityError(f"{folder} must hold exactly one {what}, found {len(files)}: {names}")
    return files[0]


def load_msp(msp_dir: Path | str, msp_id: str) -> tuple[Identity, Signer]:
    """Load the identity and signer of an MSP folder as cryptogen or a Fabric CA writes it."""
    if not msp_id or len(msp_id) > MAX_MSP_ID_CHARS or not msp_id.isprintable():
        raise IdentityError(f"MSP id {msp_id!r} must be 1..{MAX_MSP_ID_CHARS} printable chars")
    msp = Path(msp_dir)
    cert_path = _only_file(msp / "signcerts", "certificate")
    key_path = _only_file(msp / "keystore", "private key")
    cert_pem = _read_pem(cert_path)
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise IdentityError(f"{cert_path} is not a PEM X.509 certificate: {exc}") from exc
    try:
        key = serialization.load_pem_private_key(_read_pem(key_path), password=None)
    except (ValueError, TypeError) as exc:
        raise IdentityError(f"{key_path} is not an unencrypted PEM private key: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise IdentityError(f"{key_path} holds a {type(key).__name__}, expected an EC key")
    signer = Signer(key)
    cert_key = cert.public_key()
    if not isinstance(cert_key, ec.EllipticCurvePublicKey) or cert_key.public_numbers() != (
        signer.public_key().public_numbers()
    ):
        raise IdentityError(f"{key_path} is not the private key of {cert_path}")
    return Identity(msp_id, cert_pem), signer
