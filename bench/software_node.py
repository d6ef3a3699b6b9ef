"""A node agent's TPM in software, for the fleet bench's nodes beyond its swtpm sample.

What it keeps identical from the API inward: it speaks the same agent API through the same
client (`attest.agent.http.enrol` / `attest_once`); its EK is a P-256 storage key (restricted
decrypt, AES-128 CFB) certified by an EK CA the bench makes at run time and both
organisations approve on the ledger like the swtpm CA; its AK is a P-256 restricted signing
key with an AK's attributes; it answers the server's MakeCredential with the TPM's
ActivateCredential arithmetic (KDFe, KDFa, AES-CFB); its quotes are TPMS_ATTEST structures
over the challenged PCR selection, signed ECDSA-P256/SHA-256 by the AK. The server, the
verifier, the ledger's contract and every worker handle them exactly as a TPM's.

What it is not: a TPM. Its keys live in this process's memory, so nothing it signs proves a
machine's state; it exists only so one machine can load the server with a fleet. Never use
it outside a bench.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.x509.oid import NameOID

from attest import tpm_constants as C
from attest.agent.tpm import AkKey, EnrolmentRequest, QuoteEvidence
from attest.credential import IDENTITY_LABEL, kdfa, kdfe
from attest.public import SOFTWARE_AK_ATTRS, encode_ecc_public, parse_public
from attest.structs import encode_pcr_selection
from attest.wire import tpm2b

EK_ATTRS = (
    C.ATTR_FIXED_TPM
    | C.ATTR_FIXED_PARENT
    | C.ATTR_SENSITIVE_DATA_ORIGIN
    | C.ATTR_ADMIN_WITH_POLICY
    | C.ATTR_RESTRICTED
    | C.ATTR_DECRYPT
)
AES_BITS = 128
AES_BLOCK = 16
CURVE_BYTES = 32
CA_DAYS = 30
PCRS = (0, 2, 7)
FIRMWARE_VERSION = 0x20191023


def pcr_values() -> dict[int, bytes]:
    """The PCRs every software node reports (its PCR policy's golden values)."""
    return {i: hashlib.sha256(b"wattlease-bench-pcr-%d" % i).digest() for i in PCRS}


def golden() -> dict[str, dict[str, str]]:
    return {"sha256": {str(i): v.hex() for i, v in pcr_values().items()}}


def ek_public_area(key: ec.EllipticCurvePublicKey) -> bytes:
    """TPM2B_PUBLIC of a P-256 EK: a storage key with AES-128 CFB, as a TPM's EK template."""
    n = key.public_numbers()
    body = C.ALG_ECC.to_bytes(2, "big") + C.ALG_SHA256.to_bytes(2, "big")
    body += EK_ATTRS.to_bytes(4, "big") + tpm2b(b"")
    body += C.ALG_AES.to_bytes(2, "big") + AES_BITS.to_bytes(2, "big")
    body += C.ALG_CFB.to_bytes(2, "big")
    body += C.ALG_NULL.to_bytes(2, "big")  # no signing scheme
    body += C.ECC_NIST_P256.to_bytes(2, "big") + C.ALG_NULL.to_bytes(2, "big")
    body += tpm2b(n.x.to_bytes(CURVE_BYTES, "big")) + tpm2b(n.y.to_bytes(CURVE_BYTES, "big"))
    return tpm2b(body)


@dataclass
class SoftwareEkCa:
    """An EK CA made at run time: its root certificate goes into TPM_EK_CA_DIR."""

    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )

    def __post_init__(self) -> None:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Wattlease bench EK CA")])
        self.root = self._cert(name, self.key.public_key(), ca=True)

    def _cert(self, subject: x509.Name, public, ca: bool) -> x509.Certificate:
        now = dt.datetime.now(dt.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(
                x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Wattlease bench EK CA")])
            )
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    def issue(self, ek: ec.EllipticCurvePublicKey, node: str) -> bytes:
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"EK of {node}")])
        return self._cert(subject, ek, ca=False).public_bytes(serialization.Encoding.DER)

    def write_root(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "bench-root.pem").write_bytes(
            self.root.public_bytes(serialization.Encoding.PEM)
        )


class SoftwareTpm:
    """The `attest.agent.tpm.Agent` methods `enrol`, `activate` and `quote`, in software."""

    def __init__(self, ca: SoftwareEkCa, node: str) -> None:
        self.ek = ec.generate_private_key(ec.SECP256R1())
        self.ek_public = ek_public_area(self.ek.public_key())
        self.ek_certificate = ca.issue(self.ek.public_key(), node)
        self.ak_keys: dict[bytes, ec.EllipticCurvePrivateKey] = {}
        self.clock_ms = 1_000

    def enrol(self, alg: str = "ecc") -> EnrolmentRequest:
        key = ec.generate_private_key(ec.SECP256R1())
        public = encode_ecc_public(key.public_key(), SOFTWARE_AK_ATTRS)
        name = parse_public(public).name()
        self.ak_keys[name] = key
        ak = AkKey(public=public, private=b"", name=name)
        return EnrolmentRequest(self.ek_public, self.ek_certificate, ak)

    def activate(self, ak: AkKey, credential_blob: bytes, secret: bytes) -> bytes:
        """ActivateCredential: recover the seed from the ephemeral point (KDFe), check the
        outer HMAC over the AK's Name, decrypt the credential (KDFa + AES-CFB)."""
        point = secret[2:]
        x_len = int.from_bytes(point[:2], "big")
        x = point[2 : 2 + x_len]
        y = point[4 + x_len :]
        ephemeral = ec.EllipticCurvePublicNumbers(
            int.from_bytes(x, "big"), int.from_bytes(y, "big"), ec.SECP256R1()
        ).public_key()
        z = self.ek.exchange(ec.ECDH(), ephemeral)
        ek_x = self.ek.public_key().public_numbers().x.to_bytes(CURVE_BYTES, "big")
        seed = kdfe(C.ALG_SHA256, z, IDENTITY_LABEL, x, ek_x, 256)
        blob = credential_blob[2:]
        hmac_len = int.from_bytes(blob[:2], "big")
        enc_identity = blob[2 + hmac_len :]
        sym_key = kdfa(C.ALG_SHA256, seed, b"STORAGE", ak.name, b"", AES_BITS)
        dec = Cipher(algorithms.AES(sym_key), modes.CFB(bytes(AES_BLOCK))).decryptor()
        identity = dec.update(enc_identity) + dec.finalize()
        return identity[2 : 2 + int.from_bytes(identity[:2], "big")]

    def quote(self, ak: AkKey, nonce: bytes, selection: str = "sha256:0,2,7") -> QuoteEvidence:
        bank, _, pcrs = selection.partition(":")
        if bank != "sha256":
            raise ValueError(f"software nodes quote sha256 PCRs only, not {bank}")
        wanted = sorted(int(p) for p in pcrs.split(","))
        values = {i: pcr_values()[i] for i in wanted}
        digest = hashlib.sha256(b"".join(values[i] for i in wanted)).digest()
        self.clock_ms += 1_000
        body = C.TPM_GENERATED_VALUE.to_bytes(4, "big") + C.TPM_ST_ATTEST_QUOTE.to_bytes(2, "big")
        body += tpm2b(ak.name) + tpm2b(nonce)
        body += self.clock_ms.to_bytes(8, "big") + (1).to_bytes(4, "big") + (0).to_bytes(4, "big")
        body += bytes([1]) + FIRMWARE_VERSION.to_bytes(8, "big")
        body += encode_pcr_selection(((C.ALG_SHA256, frozenset(wanted)),)) + tpm2b(digest)
        r, s = decode_dss_signature(self.ak_keys[ak.name].sign(body, ec.ECDSA(hashes.SHA256())))
        signature = C.ALG_ECDSA.to_bytes(2, "big") + C.ALG_SHA256.to_bytes(2, "big")
        signature += tpm2b(r.to_bytes(CURVE_BYTES, "big")) + tpm2b(s.to_bytes(CURVE_BYTES, "big"))
        return QuoteEvidence(body, signature, {"sha256": values})
