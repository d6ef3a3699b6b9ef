"""Many identities of one organisation at once, for the contract suite: `enroll` issues a new
identity (an MSP folder the Gateway client loads) with the NodeOU role in its subject's OU
(`client`, `admin` or `peer`), signed on the organisation's own host with its Fabric CA's key
(the CA server's home), in the shape `fabric-ca-client enroll` writes. One process per
identity would cost a registration and an enrollment each; the tests make hundreds.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from chaincode_client.fabric_network.layout import Layout, NetworkError, Org

CERT_DAYS = 365
CLOCK_SLACK = dt.timedelta(minutes=5)  # valid a little before issue, for clocks behind ours
ROLES = ("client", "admin", "peer")
SPKI_ENCODING = serialization.Encoding.DER
SPKI_FORMAT = serialization.PublicFormat.SubjectPublicKeyInfo


def _ca(ca_dir: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA certificate of a fabric-ca-server home and, among the keys in its keystore
    (its TLS key sits there too), the one that certificate certifies."""
    try:
        cert = x509.load_pem_x509_certificate((ca_dir / "ca-cert.pem").read_bytes())
    except (OSError, ValueError) as exc:
        raise NetworkError(f"{ca_dir}: no CA certificate (ca-cert.pem): {exc}") from exc
    wanted = cert.public_key().public_bytes(SPKI_ENCODING, SPKI_FORMAT)
    for path in sorted((ca_dir / "msp" / "keystore").glob("*_sk")):
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if (
            isinstance(key, ec.EllipticCurvePrivateKey)
            and key.public_key().public_bytes(SPKI_ENCODING, SPKI_FORMAT) == wanted
        ):
            return cert, key
    raise NetworkError(f"{ca_dir}: no key in msp/keystore matches ca-cert.pem")


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
    msp = layout.host_dir(org.msp_id) / "identities" / name / "msp"
    if (msp / "signcerts" / "cert.pem").is_file():
        return msp
    tmp = msp.parent / "issued"
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role),
            x509.NameAttribute(NameOID.COMMON_NAME, f"{name}@{org.domain}"),
        ]
    )
    _issue(layout.ca_home(org.msp_id), subject, [], tmp)
    for sub, src in (("signcerts", "cert.pem"), ("keystore", "key.pem")):
        (msp / sub).mkdir(parents=True, exist_ok=True)
        (tmp / src).replace(msp / sub / src)
    tmp.rmdir()
    shared = layout.org_dir(org) / "msp"
    for sub in ("cacerts", "tlscacerts"):
        shutil.copytree(shared / sub, msp / sub, dirs_exist_ok=True)
    shutil.copyfile(shared / "config.yaml", msp / "config.yaml")
    return msp
