"""Hand-marshalled TPM structures for parser tests and forgeries.

A forger with a non-restricted key can build any TPMS_ATTEST it likes; these builders are
that forger. Genuine evidence in the tests always comes from a real swtpm.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from attest import tpm_constants as C
from attest.structs import Selection, encode_pcr_selection


def tpm2b(data: bytes) -> bytes:
    return len(data).to_bytes(2, "big") + data


def ecc_public(key: ec.EllipticCurvePublicKey, attrs: int, scheme: int = C.ALG_ECDSA) -> bytes:
    """TPM2B_PUBLIC for a P-256 key with the given attributes."""
    n = key.public_numbers()
    body = C.ALG_ECC.to_bytes(2, "big") + C.ALG_SHA256.to_bytes(2, "big")
    body += attrs.to_bytes(4, "big") + tpm2b(b"")
    body += C.ALG_NULL.to_bytes(2, "big")  # symmetric
    body += scheme.to_bytes(2, "big")
    if scheme != C.ALG_NULL:
        body += C.ALG_SHA256.to_bytes(2, "big")
    body += C.ECC_NIST_P256.to_bytes(2, "big") + C.ALG_NULL.to_bytes(2, "big")
    body += tpm2b(n.x.to_bytes(32, "big")) + tpm2b(n.y.to_bytes(32, "big"))
    return tpm2b(body)


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
