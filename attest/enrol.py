"""Enrolment, verifier side: EK certificate chain, EK/AK checks and the credential challenge.

    challenge = start_enrolment(ek_public, ek_cert, ak_public, roots, intermediates)
    # send challenge.credential_blob / challenge.secret to the agent; keep challenge.expected
    result = finish_enrolment(challenge, answer_from_agent)

Pure `cryptography`; the roots are the operator's configured EK CA certificates.
"""

from __future__ import annotations

import datetime as dt
import hmac
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from attest import tpm_constants as C
from attest.credential import make_credential
from attest.errors import EnrolmentError, MalformedEvidence
from attest.public import PublicArea, parse_public
from attest.verdict import Reason

MAX_CERT_BYTES = 8192
MAX_CHAIN_DEPTH = 4  # EK → (intermediates) → root; real EK chains have 1-3 CAs
CREDENTIAL_BYTES = 32
EK_REQUIRED_ATTRS = C.ATTR_RESTRICTED | C.ATTR_DECRYPT | C.ATTR_FIXED_TPM | C.ATTR_FIXED_PARENT


@dataclass
class EnrolmentResult:
    reasons: list[Reason] = field(default_factory=list)
    ak_name: bytes | None = None
    ek_name: bytes | None = None

    @property
    def ok(self) -> bool:
        return not self.reasons

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "reasons": [r.to_dict() for r in self.reasons],
            "ak_name": self.ak_name.hex() if self.ak_name else None,
            "ek_name": self.ek_name.hex() if self.ek_name else None,
        }


@dataclass(frozen=True)
class EnrolmentChallenge:
    """What the verifier keeps (expected, ak_public) and sends (credential_blob, secret)."""

    ak_public: bytes
    ak_name: bytes
    ek_name: bytes
    credential_blob: bytes
    secret: bytes
    expected: bytes


def load_certificate(data: bytes, what: str = "EK certificate") -> x509.Certificate:
    if not isinstance(data, bytes) or not 0 < len(data) <= MAX_CERT_BYTES:
        raise EnrolmentError(f"{what}: must be 1..{MAX_CERT_BYTES} bytes")
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return x509.load_pem_x509_certificate(data)
        return x509.load_der_x509_certificate(data)
    except ValueError as exc:
        raise EnrolmentError(f"{what}: not an X.509 certificate: {exc}") from None


def _valid_now(cert: x509.Certificate, now: dt.datetime) -> bool:
    return cert.not_valid_before_utc <= now <= cert.not_valid_after_utc


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except (x509.ExtensionNotFound, ValueError):
        return False


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def check_ek_chain(
    cert: x509.Certificate,
    roots: Sequence[x509.Certificate],
    intermediates: Sequence[x509.Certificate] = (),
    now: dt.datetime | None = None,
) -> list[Reason]:
    """Walk issuer links from the EK certificate up to one of `roots`; every CA on the way
    must be a CA, in its validity period, and have signed the certificate below it."""
    now = now or dt.datetime.now(dt.UTC)
    if not _valid_now(cert, now):
        return [Reason("ek_cert_expired", "EK certificate is outside its validity period")]
    current = cert
    for _ in range(MAX_CHAIN_DEPTH):
        for root in roots:
            if root.subject == current.issuer and _issued_by(current, root):
                if not _valid_now(root, now):
                    return [Reason("ek_cert_untrusted", "the EK CA root is outside its validity")]
                return []
        parents = [
            c
            for c in intermediates
            if c.subject == current.issuer and _is_ca(c) and _issued_by(current, c)
        ]
        if not parents:
            break
        if not _valid_now(parents[0], now):
            return [Reason("ek_cert_untrusted", "an intermediate EK CA is outside its validity")]
        current = parents[0]
    return [
        Reason(
            "ek_cert_untrusted",
            f"no chain from EK certificate (issuer {cert.issuer.rfc4514_string()!r}) "
            "to a configured EK CA root",
        )
    ]


def _same_key(cert: x509.Certificate, ek: PublicArea) -> bool:
    cert_key = cert.public_key()
    ek_key = ek.public_key()
    if isinstance(cert_key, rsa.RSAPublicKey) and isinstance(ek_key, rsa.RSAPublicKey):
        return cert_key.public_numbers() == ek_key.public_numbers()
    if isinstance(cert_key, ec.EllipticCurvePublicKey) and isinstance(
        ek_key, ec.EllipticCurvePublicKey
    ):
        return cert_key.public_numbers() == ek_key.public_numbers()
    return False


def check_ek(
    ek_public: bytes,
    ek_certificate: bytes | None,
    roots: Sequence[x509.Certificate],
    intermediates: Sequence[x509.Certificate] = (),
    now: dt.datetime | None = None,
) -> tuple[PublicArea | None, list[Reason]]:
    """The EK public area is a real EK (restricted decrypt, fixedTPM) certified by a root."""
    try:
        ek = parse_public(ek_public)
        ek.public_key()
    except MalformedEvidence as exc:
        return None, [Reason("ek_public_malformed", str(exc))]
    reasons: list[Reason] = []
    if not ek.has_attributes(EK_REQUIRED_ATTRS) or ek.has_attributes(C.ATTR_SIGN):
        reasons.append(Reason("ek_not_endorsement_key", f"EK attributes {ek.attributes:#010x}"))
    if ek_certificate is None:
        return ek, [*reasons, Reason("ek_cert_missing", "no EK certificate to check the EK")]
    try:
        cert = load_certificate(ek_certificate)
    except EnrolmentError as exc:
        return ek, [*reasons, Reason("ek_cert_malformed", str(exc))]
    if not _same_key(cert, ek):
        reasons.append(Reason("ek_cert_key_mismatch", "EK certificate is for another key"))
    return ek, reasons + check_ek_chain(cert, roots, intermediates, now)


def start_enrolment(
    ek_public: bytes,
    ek_certificate: bytes | None,
    ak_public: bytes,
    roots: Sequence[x509.Certificate],
    intermediates: Sequence[x509.Certificate] = (),
    now: dt.datetime | None = None,
) -> tuple[EnrolmentChallenge | None, EnrolmentResult]:
    """Check EK and AK; if both are acceptable, a credential challenge bound to the AK Name."""
    result = EnrolmentResult()
    ek, reasons = check_ek(ek_public, ek_certificate, roots, intermediates, now)
    result.reasons += reasons
    try:
        ak = parse_public(ak_public)
        ak.public_key()
    except MalformedEvidence as exc:
        result.reasons.append(Reason("ak_malformed", str(exc)))
        return None, result
    if not ak.has_attributes(C.AK_REQUIRED_ATTRS) or ak.has_attributes(C.ATTR_DECRYPT):
        result.reasons.append(
            Reason("ak_not_restricted_signing_key", f"AK attributes {ak.attributes:#010x}")
        )
    result.ak_name = ak.name()
    if ek is None or result.reasons:
        return None, result
    result.ek_name = ek.name()
    expected = os.urandom(CREDENTIAL_BYTES)
    blob, secret = make_credential(ek, result.ak_name, expected)
    return EnrolmentChallenge(
        ak_public, result.ak_name, result.ek_name, blob, secret, expected
    ), result


def finish_enrolment(challenge: EnrolmentChallenge, answer: bytes) -> EnrolmentResult:
    """The agent's ActivateCredential answer must equal the secret we wrapped."""
    result = EnrolmentResult(ak_name=challenge.ak_name, ek_name=challenge.ek_name)
    if not isinstance(answer, bytes) or not hmac.compare_digest(answer, challenge.expected):
        result.reasons.append(
            Reason(
                "credential_mismatch",
                "ActivateCredential answer is not our secret: the AK "
                "is not in the TPM that holds this EK",
            )
        )
    return result
