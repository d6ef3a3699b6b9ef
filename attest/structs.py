"""Parsers for TPMS_ATTEST (quote), TPMT_SIGNATURE and TPML_PCR_SELECTION.

Pure `cryptography`-free byte parsing; every failure is a `MalformedEvidence` with the field
and offset. The verifier and the chaincode share these.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from typing import NamedTuple

from attest import tpm_constants as C
from attest.wire import Reader

MAX_NAME_BYTES = 2 + 64  # TPM2B_NAME: nameAlg + the largest digest
MAX_EXTRA_DATA_BYTES = 64  # TPM2B_DATA in an attest is at most a digest in size
MAX_SIG_BYTES = 512  # RSA-4096 signature
MAX_ECC_SCALAR_BYTES = 66  # P-521
MAX_ATTESTED_BYTES = 1024
MAX_PCR_DIGEST_BYTES = 64  # a TPM2B_DIGEST: the largest digest
# TPMS_CLOCK_INFO (clock u64, resetCount u32, restartCount u32, safe u8) + firmwareVersion u64
CLOCK_AND_FIRMWARE = struct.Struct(">QIIBQ")
MAGIC_AND_TYPE = struct.Struct(">IH")  # the attested union for non-quote types, kept raw

# A PCR selection: {hash alg id: frozenset of PCR indices}, in the order the TPM reported.
Selection = tuple[tuple[int, frozenset[int]], ...]


_BYTE_BITS = tuple(tuple(bit for bit in range(8) if value >> bit & 1) for value in range(256))


@lru_cache(maxsize=1024)  # a fleet uses a handful of distinct selections
def bitmap_to_pcrs(bitmap: bytes) -> frozenset[int]:
    """PCR indices set in a pcrSelect bitmap (bit k of byte b selects PCR 8b + k)."""
    return frozenset(b * 8 + bit for b, value in enumerate(bitmap) for bit in _BYTE_BITS[value])


def read_pcr_selection(r: Reader, field: str = "pcrSelect") -> Selection:
    """Read TPML_PCR_SELECTION; rejects duplicate banks and out-of-range sizes.
    On the verifier's hot path: field names are built only when a check fails."""
    count_at = r.offset
    count = r.u32(f"{field}.count")
    if count > C.MAX_PCR_BANKS:
        raise r.fail(f"{field}.count", f"{count} banks exceeds {C.MAX_PCR_BANKS}", count_at)
    banks: list[tuple[int, frozenset[int]]] = []
    seen: set[int] = set()
    data = r.data
    for i in range(count):
        at = r.offset
        if r.size - at < 3:  # hash (2) + sizeofSelect (1)
            raise r.fail(f"{field}[{i}]", f"needs 3 bytes, only {r.size - at} left", at)
        alg = (data[at] << 8) | data[at + 1]
        size = data[at + 2]
        if alg not in C.HASH_ALGS:
            raise r.fail(f"{field}[{i}].hash", f"unknown hash algorithm {alg:#06x}", at)
        if alg in seen:
            raise r.fail(f"{field}[{i}].hash", f"bank {C.HASH_NAMES[alg]} repeated", at)
        if not 1 <= size <= C.MAX_PCR_SELECT_BYTES:
            raise r.fail(f"{field}[{i}].sizeofSelect", f"invalid size {size}", at + 2)
        end = at + 3 + size
        if end > r.size:
            raise r.fail(f"{field}[{i}].pcrSelect", f"needs {size} bytes", at + 3)
        seen.add(alg)
        banks.append((alg, bitmap_to_pcrs(data[at + 3 : end])))
        r.offset = end
    return tuple(banks)


def encode_pcr_selection(selection: Selection) -> bytes:
    """Marshal a selection back to TPML_PCR_SELECTION (3-byte bitmaps, as TPMs use)."""
    out = len(selection).to_bytes(4, "big")
    for alg, pcrs in selection:
        bitmap = bytearray(C.MAX_PCR_SELECT_BYTES - 1)
        for pcr in pcrs:
            bitmap[pcr // 8] |= 1 << (pcr % 8)
        out += alg.to_bytes(2, "big") + bytes([len(bitmap)]) + bytes(bitmap)
    return out


def parse_pcr_selection(data: bytes) -> Selection:
    r = Reader(data, "TPML_PCR_SELECTION")
    sel = read_pcr_selection(r)
    r.end()
    return sel


class Attest(NamedTuple):
    """A parsed TPMS_ATTEST; `raw` is the exact bytes the signature covers."""

    magic: int
    type: int
    qualified_signer: bytes
    extra_data: bytes
    clock: int
    reset_count: int
    restart_count: int
    safe: bool
    firmware_version: int
    pcr_select: Selection
    pcr_digest: bytes
    raw: bytes


def parse_attest(data: bytes) -> Attest:
    """Parse TPMS_ATTEST, raw (as `tpm2_quote -m` writes) or wrapped in TPM2B_ATTEST."""
    if type(data) is bytes:
        quote = _well_formed_quote(data)
        if quote is not None:
            return quote
    return _parse_attest(data)


def _well_formed_quote(data: bytes) -> Attest | None:
    """The verifier's hot path: a quote that passes every check `_parse_attest` makes, parsed
    with plain index arithmetic (no Reader, no per-field calls); None for anything else, which
    `_parse_attest` then parses or refuses with the field and offset. Both give the same
    Attest for every input they both accept (tests/attest/test_parsers_fuzz.py)."""
    size = len(data)
    if size >= 2 and (data[0] << 8 | data[1]) == size - 2:
        data, size = data[2:], size - 2
    if size < MAGIC_AND_TYPE.size + 2:
        return None
    magic, st = MAGIC_AND_TYPE.unpack_from(data, 0)
    signer_end = 8 + (data[6] << 8 | data[7])
    if st != C.TPM_ST_ATTEST_QUOTE or signer_end - 8 > MAX_NAME_BYTES or signer_end + 2 > size:
        return None
    extra_end = signer_end + 2 + (data[signer_end] << 8 | data[signer_end + 1])
    if extra_end - signer_end - 2 > MAX_EXTRA_DATA_BYTES:
        return None
    at = extra_end + CLOCK_AND_FIRMWARE.size
    if at + 4 > size:
        return None
    clock, reset_count, restart_count, safe, firmware = CLOCK_AND_FIRMWARE.unpack_from(
        data, extra_end
    )
    count = int.from_bytes(data[at : at + 4], "big")
    if safe > 1 or count > C.MAX_PCR_BANKS:
        return None
    at += 4
    banks: list[tuple[int, frozenset[int]]] = []
    for _ in range(count):
        if at + 3 > size:
            return None
        alg, select = data[at] << 8 | data[at + 1], data[at + 2]
        end = at + 3 + select
        if alg not in C.HASH_ALGS or not 1 <= select <= C.MAX_PCR_SELECT_BYTES or end > size:
            return None
        if any(alg == seen for seen, _ in banks):
            return None
        banks.append((alg, bitmap_to_pcrs(data[at + 3 : end])))
        at = end
    if at + 2 > size or (data[at] << 8 | data[at + 1]) > MAX_PCR_DIGEST_BYTES:
        return None
    if at + 2 + (data[at] << 8 | data[at + 1]) != size:  # the digest ends the structure
        return None
    return Attest(
        magic,
        st,
        data[8:signer_end],
        data[signer_end + 2 : extra_end],
        clock,
        reset_count,
        restart_count,
        bool(safe),
        firmware,
        tuple(banks),
        data[at + 2 :],
        data,
    )


def _parse_attest(data: bytes) -> Attest:
    """Every TPMS_ATTEST, each failure named by field and offset."""
    r = Reader(data, "TPMS_ATTEST")
    # A raw TPMS_ATTEST starts with the magic 0xff54..., which no bounded size prefix equals.
    if len(r.data) >= 2 and int.from_bytes(r.data[:2], "big") == len(r.data) - 2:
        r = Reader(r.data[2:], "TPMS_ATTEST")  # unwrap TPM2B_ATTEST
    if r.size < MAGIC_AND_TYPE.size:
        raise r.fail("magic", f"needs {MAGIC_AND_TYPE.size} bytes, only {r.size} left")
    magic, st = MAGIC_AND_TYPE.unpack_from(r.data, 0)
    r.offset = MAGIC_AND_TYPE.size
    signer = r.tpm2b("qualifiedSigner", MAX_NAME_BYTES)
    extra = r.tpm2b("extraData", MAX_EXTRA_DATA_BYTES)
    at = r.offset
    if r.size - at < CLOCK_AND_FIRMWARE.size:
        raise r.fail("clockInfo", f"needs {CLOCK_AND_FIRMWARE.size} bytes, only {r.size - at} left")
    clock, reset_count, restart_count, safe, firmware = CLOCK_AND_FIRMWARE.unpack_from(r.data, at)
    if safe > 1:
        raise r.fail("clockInfo.safe", f"TPMI_YES_NO must be 0 or 1, got {safe}", at + 16)
    r.offset = at + CLOCK_AND_FIRMWARE.size
    selection: Selection = ()
    digest = b""
    if st == C.TPM_ST_ATTEST_QUOTE:
        selection = read_pcr_selection(r, "attested.quote.pcrSelect")
        digest = r.tpm2b("attested.quote.pcrDigest", MAX_PCR_DIGEST_BYTES)
    elif r.remaining() > MAX_ATTESTED_BYTES:
        raise r.fail("attested", f"{r.remaining()} bytes exceeds {MAX_ATTESTED_BYTES}")
    else:
        r.take(r.remaining(), "attested")  # not a quote: the verifier reports the type
    r.end()
    return Attest(
        magic,
        st,
        signer,
        extra,
        clock,
        reset_count,
        restart_count,
        bool(safe),
        firmware,
        selection,
        digest,
        r.data,
    )


class Signature(NamedTuple):
    """A parsed TPMT_SIGNATURE. `sig` is the RSA signature, or `r`/`s` for ECDSA."""

    sig_alg: int
    hash_alg: int
    sig: bytes = b""
    r: bytes = b""
    s: bytes = b""


ECC_SIG_ALGS = {C.ALG_ECDSA, 0x001A, 0x001B, 0x001C}  # ECDSA, ECDAA, SM2, ECSCHNORR


def parse_signature(data: bytes) -> Signature:
    """Parse TPMT_SIGNATURE (as `tpm2_quote -s` writes in its default tss format)."""
    if type(data) is bytes:
        ecc = _well_formed_ecc_signature(data)
        if ecc is not None:
            return ecc
    return _parse_signature(data)


def _well_formed_ecc_signature(data: bytes) -> Signature | None:
    """The hot path for an ECC signature that passes every check `_parse_signature` makes
    (None for anything else, which `_parse_signature` then parses or refuses)."""
    size = len(data)
    if size < 8 or (data[0] << 8 | data[1]) not in ECC_SIG_ALGS:
        return None
    r_end = 6 + (data[4] << 8 | data[5])
    if r_end - 6 > MAX_ECC_SCALAR_BYTES or r_end + 2 > size:
        return None
    s_end = r_end + 2 + (data[r_end] << 8 | data[r_end + 1])
    if s_end - r_end - 2 > MAX_ECC_SCALAR_BYTES or s_end != size:
        return None
    alg, hash_alg = data[0] << 8 | data[1], data[2] << 8 | data[3]
    return Signature(alg, hash_alg, r=data[6:r_end], s=data[r_end + 2 : s_end])


def _parse_signature(data: bytes) -> Signature:
    r = Reader(data, "TPMT_SIGNATURE")
    alg_at = r.offset
    alg = r.u16("sigAlg")
    if alg == C.ALG_NULL:
        r.end()
        return Signature(alg, C.ALG_NULL)
    hash_at = r.offset
    hash_alg = r.u16("signature.hash")
    if alg in (C.ALG_RSASSA, C.ALG_RSAPSS):
        out = Signature(alg, hash_alg, sig=r.tpm2b("signature.sig", MAX_SIG_BYTES))
    elif alg in ECC_SIG_ALGS:
        sig_r = r.tpm2b("signature.signatureR", MAX_ECC_SCALAR_BYTES)
        sig_s = r.tpm2b("signature.signatureS", MAX_ECC_SCALAR_BYTES)
        out = Signature(alg, hash_alg, r=sig_r, s=sig_s)
    elif alg == C.ALG_HMAC:
        if hash_alg not in C.DIGEST_SIZES:
            raise r.fail("signature.hash", f"unknown hash {hash_alg:#06x}", hash_at)
        out = Signature(alg, hash_alg, sig=r.take(C.DIGEST_SIZES[hash_alg], "signature.digest"))
    else:
        raise r.fail("sigAlg", f"unknown signature algorithm {alg:#06x}", alg_at)
    r.end()
    return out
