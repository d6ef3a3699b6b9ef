"""TPM 2.0 constants the verifier needs (TPM 2.0 Library spec Part 2), named, with sizes."""

from __future__ import annotations

import hashlib

from cryptography.hazmat.primitives import hashes

TPM_GENERATED_VALUE = 0xFF544347  # TPMS_ATTEST.magic: "\xffTCG"
TPM_ST_ATTEST_QUOTE = 0x8018

ALG_RSA = 0x0001
ALG_SHA1 = 0x0004
ALG_HMAC = 0x0005
ALG_AES = 0x0006
ALG_KEYEDHASH = 0x0008
ALG_SHA256 = 0x000B
ALG_SHA384 = 0x000C
ALG_SHA512 = 0x000D
ALG_NULL = 0x0010
ALG_RSASSA = 0x0014
ALG_RSAPSS = 0x0016
ALG_ECDSA = 0x0018
ALG_ECDH = 0x0019
ALG_ECC = 0x0023
ALG_SYMCIPHER = 0x0025
ALG_CFB = 0x0043

ECC_NIST_P256 = 0x0003
ECC_NIST_P384 = 0x0004
ECC_NIST_P521 = 0x0005

# TPMA_OBJECT bits
ATTR_FIXED_TPM = 1 << 1
ATTR_ST_CLEAR = 1 << 2
ATTR_FIXED_PARENT = 1 << 4
ATTR_SENSITIVE_DATA_ORIGIN = 1 << 5
ATTR_USER_WITH_AUTH = 1 << 6
ATTR_ADMIN_WITH_POLICY = 1 << 7
ATTR_NO_DA = 1 << 10
ATTR_ENCRYPTED_DUPLICATION = 1 << 11
ATTR_RESTRICTED = 1 << 16
ATTR_DECRYPT = 1 << 17
ATTR_SIGN = 1 << 18

AK_REQUIRED_ATTRS = ATTR_RESTRICTED | ATTR_SIGN | ATTR_FIXED_TPM | ATTR_FIXED_PARENT

HASH_ALGS: dict[int, type[hashes.HashAlgorithm]] = {
    ALG_SHA1: hashes.SHA1,
    ALG_SHA256: hashes.SHA256,
    ALG_SHA384: hashes.SHA384,
    ALG_SHA512: hashes.SHA512,
}
HASH_NAMES: dict[int, str] = {
    ALG_SHA1: "sha1",
    ALG_SHA256: "sha256",
    ALG_SHA384: "sha384",
    ALG_SHA512: "sha512",
}
HASH_IDS: dict[str, int] = {name: alg for alg, name in HASH_NAMES.items()}
DIGEST_SIZES: dict[int, int] = {
    ALG_SHA1: 20,
    ALG_SHA256: 32,
    ALG_SHA384: 48,
    ALG_SHA512: 64,
}

PCR_COUNT = 24  # PC Client platform: PCRs 0..23
MAX_PCR_SELECT_BYTES = 4  # TPM2_PCR_SELECT_MAX on PC Client TPMs
MAX_PCR_BANKS = 16  # TPM2_NUM_PCR_BANKS in the TSS headers


_HASHLIB = {
    ALG_SHA1: hashlib.sha1,
    ALG_SHA256: hashlib.sha256,
    ALG_SHA384: hashlib.sha384,
    ALG_SHA512: hashlib.sha512,
}


def hash_bytes(alg: int, data: bytes) -> bytes:
    """Digest `data` with TPM hash algorithm `alg` (caller checked `alg` in HASH_ALGS).
    hashlib, not cryptography's Hash: same OpenSSL underneath, a third of the call cost; its
    named constructors, not hashlib.new(name), which looks the name up on every call."""
    return _HASHLIB[alg](data).digest()
