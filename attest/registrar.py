"""An organisation's registrar: it certifies that a node's AK lives in the TPM of an EK from a
manufacturer the organisation trusts, after a MakeCredential / ActivateCredential round of its
own, and signs that statement with its registrar key (EC P-256, never a client identity's).

    registrar = Registrar("Org1MSP", private_key, roots, intermediates)
    sent = registrar.challenge(parse_challenge_request(body))   # {challenge_id, blob, secret}
    # the node's TPM answers with TPM2_ActivateCredential
    signed = registrar.activate(*parse_activate_request(body))  # {org, ak_certificate, signature}

The signed statement (`ak_statement`) names the organisation, the node, the AK's and the EK's
TPM names and the activation time; `statement_bytes` is its one encoding, which the ledger's
check (ledger.contract.ek_binding) verifies against the registrar key both organisations
approved (governance kind "registrars"). The EK chain and activation are attest.enrol's;
MakeCredential is attest.credential's. Pure `cryptography`, no TPM: the service around it is
attest.registrar_service.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from attest.enrol import (
    MAX_CERT_BYTES,
    EnrolmentChallenge,
    finish_enrolment,
    load_certificate,
    start_enrolment,
)
from attest.errors import AttestError, EnrolmentError

STATEMENT_FIELDS = ("activated_ns", "ak_name", "ek_name", "node_id", "org")
ECDSA_SHA256 = ec.ECDSA(hashes.SHA256())
REGISTRAR_CURVE = ec.SECP256R1
MAX_KEY_B64_CHARS = 512  # a P-256 SubjectPublicKeyInfo is 91 bytes, 124 in base64
MAX_SIGNATURE_BYTES = 80  # DER ECDSA P-256: at most 72
MAX_TPM_PUBLIC_BYTES = 1024  # a TPM2B_PUBLIC of an RSA-2048 or P-256 key is under 400
MAX_INTERMEDIATES = 4
MAX_ID_CHARS = 128
CHALLENGE_ID_BYTES = 16
CHALLENGE_TTL_NS = 300 * 1_000_000_000  # a challenge unanswered for 5 minutes is forgotten
MAX_PENDING = 1024  # open challenges kept; the oldest go first beyond this
CREDENTIAL_ANSWER_BYTES = 32  # attest.enrol.CREDENTIAL_BYTES: what ActivateCredential returns


class RegistrarError(AttestError):
    """A request the registrar refuses: `code` names why, the message names field and value."""

    def __init__(self, code: str, field: str, detail: str) -> None:
        self.code = code
        self.field = field
        super().__init__(f"[registrar.{code}] {field}: {detail}")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- the statement and its encoding ---------------------------------------------------------


def ak_statement(org: str, node_id: str, ak_name: bytes, ek_name: bytes, activated_ns: int) -> dict:
    """What a registrar signs once ActivateCredential has proved the AK is in the EK's TPM."""
    return {
        "activated_ns": activated_ns,
        "ak_name": ak_name.hex(),
        "ek_name": ek_name.hex(),
        "node_id": node_id,
        "org": org,
    }


def statement_bytes(statement: dict[str, Any]) -> bytes:
    """The signed bytes: the statement's JSON with sorted keys, no whitespace, ASCII. Its
    fields are strings and integers only, so this is also the ledger's canonical JSON."""
    if not isinstance(statement, dict) or sorted(statement) != list(STATEMENT_FIELDS):
        raise RegistrarError("statement", "ak_certificate", f"must hold {STATEMENT_FIELDS}")
    return json.dumps(statement, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def load_registrar_key(text: object, field: str = "registrar key") -> ec.EllipticCurvePublicKey:
    """A registrar's public key from base64 DER SubjectPublicKeyInfo, EC P-256 only."""
    if not isinstance(text, str) or not 0 < len(text) <= MAX_KEY_B64_CHARS:
        raise RegistrarError(
            "key_malformed", field, f"must be base64 DER of <= {MAX_KEY_B64_CHARS} chars"
        )
    try:
        der = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise RegistrarError("key_malformed", field, f"not base64: {_short(text)}") from None
    try:
        key = serialization.load_der_public_key(der)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise RegistrarError("key_malformed", field, f"not a SubjectPublicKeyInfo: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, REGISTRAR_CURVE):
        raise RegistrarError("key_not_p256", field, f"{type(key).__name__} is not EC P-256")
    return key


def registrar_key_b64(key: ec.EllipticCurvePublicKey) -> str:
    """The form the governance document `registrars` holds (load_registrar_key reads it)."""
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(der).decode()


def same_key(a: object, b: ec.EllipticCurvePublicKey) -> bool:
    """Whether `a` (any public key) is the registrar key `b`."""
    return isinstance(a, ec.EllipticCurvePublicKey) and a.public_numbers() == b.public_numbers()


def signed_by(key: ec.EllipticCurvePublicKey, statement: dict[str, Any], signature: bytes) -> bool:
    try:
        key.verify(signature, statement_bytes(statement), ECDSA_SHA256)
    except InvalidSignature:
        return False
    return True


# --- request parsers (untrusted JSON from the node or the web app) ---------------------------


@dataclass(frozen=True)
class ChallengeRequest:
    node_id: str
    ek_public: bytes
    ek_certificate: bytes
    ek_intermediates: tuple[bytes, ...]
    ak_public: bytes


def _b64_field(doc: dict[str, Any], field: str, limit: int) -> bytes:
    value = doc.get(field)
    if not isinstance(value, str) or not 0 < len(value) <= 4 * ((limit + 2) // 3):
        raise RegistrarError("bad_request", field, f"must be base64 of 1-{limit} bytes")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise RegistrarError("bad_request", field, f"not base64: {_short(value)}") from None
    if not raw:
        raise RegistrarError("bad_request", field, "is empty")
    return raw


def _identifier(doc: dict[str, Any], field: str) -> str:
    value = doc.get(field)
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= MAX_ID_CHARS
        or not value.isascii()
        or not value.isprintable()
        or any(c.isspace() for c in value)
    ):
        raise RegistrarError(
            "bad_request", field, f"must be 1-{MAX_ID_CHARS} printable ASCII, got {_short(value)}"
        )
    return value


def _object(doc: object) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise RegistrarError("bad_request", "request", f"must be a JSON object, got {_short(doc)}")
    return doc


def parse_challenge_request(doc: object) -> ChallengeRequest:
    """{node_id, ek_public: b64 TPM2B_PUBLIC, ek_certificate: b64 DER or PEM,
    ek_intermediates?: [b64], ak_public: b64 TPM2B_PUBLIC}."""
    req = _object(doc)
    unknown = sorted(
        set(req) - {"node_id", "ek_public", "ek_certificate", "ek_intermediates", "ak_public"}
    )
    if unknown:
        raise RegistrarError("bad_request", "request", f"unknown field {_short(unknown[0])}")
    extra = req.get("ek_intermediates", [])
    if not isinstance(extra, list) or len(extra) > MAX_INTERMEDIATES:
        raise RegistrarError(
            "bad_request", "ek_intermediates", f"must list at most {MAX_INTERMEDIATES}"
        )
    return ChallengeRequest(
        node_id=_identifier(req, "node_id"),
        ek_public=_b64_field(req, "ek_public", MAX_TPM_PUBLIC_BYTES),
        ek_certificate=_b64_field(req, "ek_certificate", MAX_CERT_BYTES),
        ek_intermediates=tuple(_b64_field({"item": v}, "item", MAX_CERT_BYTES) for v in extra),
        ak_public=_b64_field(req, "ak_public", MAX_TPM_PUBLIC_BYTES),
    )


def parse_activate_request(doc: object) -> tuple[str, bytes]:
    """{challenge_id: hex, answer: b64 (what TPM2_ActivateCredential returned)}."""
    req = _object(doc)
    challenge_id = req.get("challenge_id")
    if (
        not isinstance(challenge_id, str)
        or len(challenge_id) != 2 * CHALLENGE_ID_BYTES
        or any(c not in "0123456789abcdef" for c in challenge_id)
    ):
        raise RegistrarError(
            "bad_request",
            "challenge_id",
            f"must be {2 * CHALLENGE_ID_BYTES} lowercase hex, got {_short(challenge_id)}",
        )
    return challenge_id, _b64_field(req, "answer", 2 * CREDENTIAL_ANSWER_BYTES)


# --- the registrar --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pending:
    node_id: str
    challenge: EnrolmentChallenge
    expires_ns: int


class Registrar:
    """One organisation's registrar: its MSP id, its private key, the EK roots it trusts."""

    def __init__(
        self,
        org: str,
        key: ec.EllipticCurvePrivateKey,
        roots: Sequence[x509.Certificate],
        intermediates: Sequence[x509.Certificate] = (),
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(
            key.curve, REGISTRAR_CURVE
        ):
            raise RegistrarError("key_not_p256", "key", "a registrar key is EC P-256")
        if not roots:
            raise RegistrarError("no_ek_roots", "ek_roots", "a registrar needs EK roots to trust")
        self.org = _identifier({"org": org}, "org")
        self._key = key
        self._roots = list(roots)
        self._intermediates = list(intermediates)
        self._clock_ns = clock_ns
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()

    @property
    def public_key_b64(self) -> str:
        return registrar_key_b64(self._key.public_key())

    def challenge(self, req: ChallengeRequest) -> dict[str, Any]:
        """Check the EK chain and both keys; MakeCredential: a fresh secret for the AK."""
        try:
            extra = [load_certificate(c, "ek_intermediates[]") for c in req.ek_intermediates]
        except EnrolmentError as exc:
            raise RegistrarError("bad_request", "ek_intermediates", str(exc)) from None
        challenge, result = start_enrolment(
            req.ek_public,
            req.ek_certificate,
            req.ak_public,
            self._roots,
            self._intermediates + extra,
        )
        if challenge is None:
            first = result.reasons[0]
            raise RegistrarError(
                first.code,
                "ek_certificate" if first.code.startswith("ek") else "ak_public",
                first.detail,
            )
        now = self._clock_ns()
        challenge_id = os.urandom(CHALLENGE_ID_BYTES).hex()
        with self._lock:
            self._expire(now)
            while len(self._pending) >= MAX_PENDING:
                self._pending.pop(next(iter(self._pending)))
            self._pending[challenge_id] = _Pending(req.node_id, challenge, now + CHALLENGE_TTL_NS)
        return {
            "org": self.org,
            "challenge_id": challenge_id,
            "credential_blob": base64.b64encode(challenge.credential_blob).decode(),
            "secret": base64.b64encode(challenge.secret).decode(),
        }

    def activate(self, challenge_id: str, answer: bytes) -> dict[str, Any]:
        """The TPM's answer must be the secret wrapped for it; then the signed AK certificate.
        A challenge is answered once, right or wrong."""
        now = self._clock_ns()
        with self._lock:
            self._expire(now)
            pending = self._pending.pop(challenge_id, None)
        if pending is None:
            raise RegistrarError(
                "unknown_challenge", "challenge_id", f"{challenge_id} is not open (expired or used)"
            )
        result = finish_enrolment(pending.challenge, answer)
        if not result.ok:
            raise RegistrarError("credential_mismatch", "answer", result.reasons[0].detail)
        statement = ak_statement(
            self.org, pending.node_id, pending.challenge.ak_name, pending.challenge.ek_name, now
        )
        signature = self._key.sign(statement_bytes(statement), ECDSA_SHA256)
        return {
            "org": self.org,
            "ak_certificate": statement,
            "signature": base64.b64encode(signature).decode(),
        }

    def _expire(self, now: int) -> None:
        for cid in [c for c, p in self._pending.items() if p.expires_ns < now]:
            del self._pending[cid]
