"""Hand-marshalled TPM structures for parser tests and forgeries.

A forger with a non-restricted key can build any TPMS_ATTEST it likes; these builders are
that forger. Genuine evidence in the tests always comes from a real swtpm.
"""

from __future__ import annotations

import datetime as dt

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from attest import tpm_constants as C
from attest.public import encode_ecc_public
from attest.structs import Selection, encode_pcr_selection
from attest.wire import tpm2b

ecc_public = encode_ecc_public  # the forger marshals keys as attest does


def attest(
    nonce: bytes,
    selection: Selection,
    pcr_digest: bytes,
    *,
    magic: int = C.TPM_GENERATED_VALUE,
    st: int = C.TPM_ST_ATTEST_QUOTE,
    clock: int = 1000,
    reset_count: int = 1,
    restart_count: int = 0,
    safe: int = 1,
    signer: bytes = b"\x00\x0b" + bytes(32),
) -> bytes:
    out = magic.to_bytes(4, "big") + st.to_bytes(2, "big") + tpm2b(signer) + tpm2b(nonce)
    out += clock.to_bytes(8, "big") + reset_count.to_bytes(4, "big")
    out += restart_count.to_bytes(4, "big") + bytes([safe]) + (0x20191023).to_bytes(8, "big")
    return out + encode_pcr_selection(selection) + tpm2b(pcr_digest)


def ecdsa_signature(key: ec.EllipticCurvePrivateKey, message: bytes) -> bytes:
    r, s = decode_dss_signature(key.sign(message, ec.ECDSA(hashes.SHA256())))
    out = C.ALG_ECDSA.to_bytes(2, "big") + C.ALG_SHA256.to_bytes(2, "big")
    return out + tpm2b(r.to_bytes(32, "big")) + tpm2b(s.to_bytes(32, "big"))


def ecdsa_from_der(der: bytes) -> bytes:
    r, s = decode_dss_signature(der)
    out = C.ALG_ECDSA.to_bytes(2, "big") + C.ALG_SHA256.to_bytes(2, "big")
    return out + tpm2b(r.to_bytes(32, "big")) + tpm2b(s.to_bytes(32, "big"))


def pcr_digest(values: dict[int, bytes]) -> bytes:
    h = hashes.Hash(hashes.SHA256())
    for pcr in sorted(values):
        h.update(values[pcr])
    return h.finalize()


SHA256_027: Selection = ((C.ALG_SHA256, frozenset({0, 2, 7})),)


def serialized_pcr_file(selection: Selection, values: list[bytes]) -> bytes:
    """The layout `tpm2_quote -o` writes by default (`-F serialized`), little-endian."""
    out = len(selection).to_bytes(4, "little")
    for i in range(16):
        if i < len(selection):
            alg, pcrs = selection[i]
            bitmap = bytearray(4)
            for pcr in pcrs:
                bitmap[pcr // 8] |= 1 << (pcr % 8)
            out += alg.to_bytes(2, "little") + b"\x03" + bytes(bitmap) + b"\x00"
        else:
            out += bytes(8)
    lists = [values[i : i + 8] for i in range(0, len(values), 8)]
    out += len(lists).to_bytes(4, "little")
    for chunk in lists:
        out += len(chunk).to_bytes(4, "little")
        for j in range(8):
            value = chunk[j] if j < len(chunk) else b""
            out += len(value).to_bytes(2, "little") + value.ljust(64, b"\x00")
    return out


def self_signed(common_name: str, ca: bool = True) -> x509.Certificate:
    """A self-signed P-256 certificate valid from a day ago to a day ahead; a CA unless
    `ca` is False (BasicConstraints, critical)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
