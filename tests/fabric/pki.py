"""Test PKI made at run time: a CA and MSP folders laid out as cryptogen writes them."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALIDITY = dt.timedelta(days=1)


def _name(cn: str, org: str, ou: str | None = None) -> x509.Name:
    units = [x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou)] if ou else []
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
            *units,
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
        ]
    )


def make_cert(
    subject_key,
    issuer_key,
    cn: str,
    org: str,
    ca: bool = False,  # type: ignore[no-untyped-def]
    issuer: x509.Name | None = None,
    sans: tuple[str, ...] = (),
    ou: str | None = None,  # the NodeOU role (client, admin, peer), as cryptogen sets it
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, org, ou))
        .issuer_name(issuer or _name(cn, org))
        .public_key(subject_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(s) for s in sans]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def pem(obj) -> bytes:  # type: ignore[no-untyped-def]
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM)
    return obj.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_msp(folder: Path, org: str = "org1.example.com", key=None, ou: str | None = None) -> Path:  # type: ignore[no-untyped-def]
    """An MSP folder with cacerts/, signcerts/ and keystore/ for a user of `org` (with the
    NodeOU `ou` in its subject, e.g. admin, when given)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = make_cert(ca_key, ca_key, f"ca.{org}", org, ca=True)
    user_key = key or ec.generate_private_key(ec.SECP256R1())
    user = make_cert(user_key, ca_key, f"User1@{org}", org, issuer=ca.subject, ou=ou)
    for sub, name, data in (
        ("cacerts", "ca.pem", pem(ca)),
        ("signcerts", "cert.pem", pem(user)),
        ("keystore", "priv_sk", pem(user_key)),
    ):
        (folder / sub).mkdir(parents=True, exist_ok=True)
        (folder / sub / name).write_bytes(data)
    return folder


def make_tls_ca(folder: Path) -> Path:
    """A TLS CA certificate file (no server uses it: enough for a client to start)."""
    key = ec.generate_private_key(ec.SECP256R1())
    path = folder / "tls-ca.pem"
    path.write_bytes(pem(make_cert(key, key, "tlsca", "example.com", ca=True)))
    return path
