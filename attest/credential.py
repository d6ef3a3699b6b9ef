"""MakeCredential in pure Python (TPM 2.0 Library spec Part 1, §24 "Credential Protection").

The verifier wraps a secret so that only the TPM holding the EK's private key, and only for
an object with the given Name (the AK), can recover it with TPM2_ActivateCredential:

  seed          RSA EK: random, RSA-OAEP(label "IDENTITY\\0", nameAlg) to the EK
                ECC EK: KDFe(nameAlg, Z, "IDENTITY", ephemeral.x, EK.x) from an ephemeral ECDH
  symKey        KDFa(nameAlg, seed, "STORAGE", AK name, "", EK symmetric key bits)
  encIdentity   AES-CFB(symKey, IV = 0) over TPM2B_DIGEST(credential)
  HMACkey       KDFa(nameAlg, seed, "INTEGRITY", "", "", digest bits)
  outerHMAC     HMAC(nameAlg, HMACkey, encIdentity || AK name)
  credentialBlob = TPM2B_ID_OBJECT(TPM2B_DIGEST(outerHMAC) || encIdentity)
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable

from cryptography.hazmat.primitives.asymmetric import ec, padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from attest import tpm_constants as C
from attest.errors import EnrolmentError
from attest.public import ECC_CURVES, PublicArea
from attest.wire import tpm2b

IDENTITY_LABEL = b"IDENTITY"
AES_BLOCK_BYTES = 16


def _label(label: bytes) -> bytes:
    return label if label.endswith(b"\0") else label + b"\0"


def kdfa(
    hash_alg: int, key: bytes, label: bytes, context_u: bytes, context_v: bytes, bits: int
) -> bytes:
    """SP 800-108 counter-mode KDF with HMAC, as the TPM defines KDFa."""
    name = C.HASH_NAMES[hash_alg]
    out = b""
    counter = 1
    while len(out) * 8 < bits:
        msg = counter.to_bytes(4, "big") + _label(label) + context_u + context_v
        out += hmac.new(key, msg + bits.to_bytes(4, "big"), name).digest()
        counter += 1
    return _truncate(out, bits)


def kdfe(hash_alg: int, z: bytes, label: bytes, party_u: bytes, party_v: bytes, bits: int) -> bytes:
    """SP 800-56A concatenation KDF, as the TPM defines KDFe (for ECDH-derived seeds)."""
    out = b""
    counter = 1
    while len(out) * 8 < bits:
        h = hashlib.new(C.HASH_NAMES[hash_alg])
        h.update(counter.to_bytes(4, "big") + z + _label(label) + party_u + party_v)
        out += h.digest()
        counter += 1
    return _truncate(out, bits)


def _truncate(data: bytes, bits: int) -> bytes:
    data = data[: (bits + 7) // 8]
    if bits % 8:  # clear the unused high bits, as the spec's KDFs do
        data = bytes([data[0] & (0xFF >> (8 - bits % 8))]) + data[1:]
    return data


def _seed_rsa(ek: PublicArea, rand: Callable[[int], bytes]) -> tuple[bytes, bytes]:
    size = C.DIGEST_SIZES[ek.name_alg]
    seed = rand(size)
    algo = C.HASH_ALGS[ek.name_alg]()
    oaep = padding.OAEP(mgf=padding.MGF1(algo), algorithm=algo, label=IDENTITY_LABEL + b"\0")
    key = ek.public_key()
    encrypted = key.encrypt(seed, oaep)  # type: ignore[union-attr]
    return seed, encrypted


def _seed_ecc(ek: PublicArea) -> tuple[bytes, bytes]:
    curve, size = ECC_CURVES[ek.curve]
    ephemeral = ec.generate_private_key(curve)
    z = ephemeral.exchange(ec.ECDH(), ek.public_key())  # type: ignore[arg-type]
    numbers = ephemeral.public_key().public_numbers()
    x, y = numbers.x.to_bytes(size, "big"), numbers.y.to_bytes(size, "big")
    ek_x = ek.unique[0].rjust(size, b"\0")
    seed = kdfe(ek.name_alg, z, IDENTITY_LABEL, x, ek_x, C.DIGEST_SIZES[ek.name_alg] * 8)
    return seed, tpm2b(x) + tpm2b(y)


def make_credential(
    ek: PublicArea,
    ak_name: bytes,
    credential: bytes,
    rand: Callable[[int], bytes] = os.urandom,
) -> tuple[bytes, bytes]:
    """Returns (TPM2B_ID_OBJECT, TPM2B_ENCRYPTED_SECRET), both with their size prefix."""
    if ek.sym_alg != C.ALG_AES or ek.sym_key_bits not in (128, 192, 256):
        raise EnrolmentError("EK has no AES storage symmetric: not a storage/EK key")
    digest_size = C.DIGEST_SIZES[ek.name_alg]
    if not 0 < len(credential) <= digest_size:
        raise EnrolmentError(f"credential must be 1..{digest_size} bytes")
    seed, secret = _seed_rsa(ek, rand) if ek.is_rsa else _seed_ecc(ek)
    sym_key = kdfa(ek.name_alg, seed, b"STORAGE", ak_name, b"", ek.sym_key_bits)
    enc = Cipher(algorithms.AES(sym_key), modes.CFB(bytes(AES_BLOCK_BYTES))).encryptor()
    enc_identity = enc.update(tpm2b(credential)) + enc.finalize()
    hmac_key = kdfa(ek.name_alg, seed, b"INTEGRITY", b"", b"", digest_size * 8)
    outer = hmac.new(hmac_key, enc_identity + ak_name, C.HASH_NAMES[ek.name_alg]).digest()
    return tpm2b(tpm2b(outer) + enc_identity), tpm2b(secret)
