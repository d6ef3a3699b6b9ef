"""Certificates a loopback network issues after cryptogen: from the organisations' own CAs.

- `enroll`: a new identity of an organisation (an MSP folder the Gateway client loads), with
  the NodeOU role in its subject's OU (`client`, `admin` or `peer`), as a Fabric CA would
  issue it. The contract suite uses it for many distinct users of one organisation.
- `issue_ccaas_tls`: the TLS server certificate of an organisation's chaincode server, from
  that organisation's TLS CA; the peer, which trusts that CA, dials it over mutual TLS.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from chaincode_client.fabric_network.layout import HOST, Layout, NetworkError, Org

CERT_DAYS = 365
CLOCK_SLACK = dt.timedelta(minutes=5)  # valid a little before issue, for clocks behind ours
ROLES = ("client", "admin", "peer")


def _ca(ca_dir: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    certs = sorted(ca_dir.glob("*-cert.pem"))
    keys = sorted(ca_dir.glob("*_sk"))
    if len(certs) != 1 or len(keys) != 1:
        raise NetworkError(f"{ca_dir}: expected one *-cert.pem and one *_sk as cryptogen writes")
    key = serialization.load_pem_private_key(keys[0].read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise NetworkError(f"{keys[0]}: not an EC private key")
    return x509.load_pem_x509_certificate(certs[0].read_bytes()), key


def _issue(
    ca_dir: Path,
    subject: x509.Name,
    extensions: list[x509.ExtensionType],
    out: Path,
) -> None:
    ca_cert, ca_key = _ca(ca_dir)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    # Fabric's MSP checks the chain as of the certificate's notBefore (+1 s): a certificate
    # valid from before its CA was (a network made minutes ago) is "creator is malformed".
    not_before = max(now - CLOCK_SLACK, ca_cert.not_valid_before_utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(now + dt.timedelta(days=CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    for ext in extensions:
        builder = builder.add_extension(ext, critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    out.mkdir(parents=True, exist_ok=True)
    (out / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path = out / "key.pem"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)


def enroll(layout: Layout, org: Org, name: str, role: str = "client") -> Path:
    """A new identity `name` of `org` with NodeOU `role`; returns its MSP folder."""
    if role not in ROLES:
        raise NetworkError(f"role {role!r}: expected one of {ROLES}")
    msp = layout.root / "identities" / org.domain / name / "msp"
    if (msp / "signcerts" / "cert.pem").is_file():
        return msp
    tmp = msp.parent / "issued"
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role),
            x509.NameAttribute(NameOID.COMMON_NAME, f"{name}@{org.domain}"),
        ]
    )
    _issue(layout.org_dir(org) / "ca", subject, [], tmp)
    for sub, src in (("signcerts", "cert.pem"), ("keystore", "key.pem")):
        (msp / sub).mkdir(parents=True, exist_ok=True)
        (tmp / src).replace(msp / sub / src)
    tmp.rmdir()
    return msp


def issue_ccaas_tls(layout: Layout, org: Org) -> Path:
    """The chaincode server's TLS pair (cert.pem, key.pem), from the org's TLS CA."""
    out = layout.ccaas_tls_dir(org)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, org.ccaas_name)])
    sans = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(HOST))]
    )
    _issue(
        layout.org_dir(org) / "tlsca",
        subject,
        [sans, x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])],
        out,
    )
    return out
