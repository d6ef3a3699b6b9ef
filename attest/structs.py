"""Parsers for TPMS_ATTEST (quote), TPMT_SIGNATURE and TPML_PCR_SELECTION.

Pure `cryptography`-free byte parsing; every failure is a `MalformedEvidence` with the field
and offset. The verifier and the chaincode share these.
"""

from __future__ import annotations

from dataclasses import dataclass

from attest import tpm_constants as C
from attest.wire import Reader

MAX_NAME_BYTES = 2 + 64  # TPM2B_NAME: nameAlg + the largest digest
MAX_EXTRA_DATA_BYTES = 64  # TPM2B_DATA in an attest is at most a digest in size
MAX_SIG_BYTES = 512  # RSA-4096 signature
MAX_ECC_SCALAR_BYTES = 66  # P-521
MAX_ATTESTED_BYTES = 1024  # the attested union for non-quote types, kept raw

# A PCR selection: {hash alg id: frozenset of PCR indices}, in the order the TPM reported.
Selection = tuple[tuple[int, frozenset[int]], ...]


def read_pcr_selection(r: Reader, field: str = "pcrSelect") -> Selection:
    """Read TPML_PCR_SELECTION; rejects duplicate banks and out-of-range sizes."""
    count_at = r.offset
    count = r.u32(f"{field}.count")
    if count > C.MAX_PCR_BANKS:
        raise r.fail(f"{field}.count", f"{count} banks exceeds {C.MAX_PCR_BANKS}", count_at)
    banks: list[tuple[int, frozenset[int]]] = []
    for i in range(count):
        alg_at = r.offset
        alg = r.u16(f"{field}[{i}].hash")
        if alg not in C.HASH_ALGS:
            raise r.fail(f"{field}[{i}].hash", f"unknown hash algorithm {alg:#06x}", alg_at)
        if any(alg == seen for seen, _ in banks):
            raise r.fail(f"{field}[{i}].hash", f"bank {C.HASH_NAMES[alg]} repeated", alg_at)
        size_at = r.offset
        size = r.u8(f"{field}[{i}].sizeofSelect")
        if not 1 <= size <= C.MAX_PCR_SELECT_BYTES:
            raise r.fail(f"{field}[{i}].sizeofSelect", f"invalid size {size}", size_at)
        bitmap = r.take(size, f"{field}[{i}].pcrSelect")
        pcrs = frozenset(
            b * 8 + bit for b in range(size) for bit in range(8) if bitmap[b] >> bit & 1
        )
        banks.append((alg, pcrs))
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


@dataclass(frozen=True)
class Attest:
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
    r = Reader(data, "TPMS_ATTEST")
    # A raw TPMS_ATTEST starts with the magic 0xff54..., which no bounded size prefix equals.
    if len(r.data) >= 2 and int.from_bytes(r.data[:2], "big") == len(r.data) - 2:
        r = Reader(r.data[2:], "TPMS_ATTEST")  # unwrap TPM2B_ATTEST
    magic = r.u32("magic")
    st = r.u16("type")
    signer = r.tpm2b("qualifiedSigner", MAX_NAME_BYTES)
    extra = r.tpm2b("extraData", MAX_EXTRA_DATA_BYTES)
    clock = r.u64("clockInfo.clock")
    reset_count = r.u32("clockInfo.resetCount")
    restart_count = r.u32("clockInfo.restartCount")
    safe_at = r.offset
    safe = r.u8("clockInfo.safe")
    if safe > 1:
        raise r.fail("clockInfo.safe", f"TPMI_YES_NO must be 0 or 1, got {safe}", safe_at)
    firmware = r.u64("firmwareVersion")
    selection: Selection = ()
    digest = b""
    if st == C.TPM_ST_ATTEST_QUOTE:
        selection = read_pcr_selection(r, "attested.quote.pcrSelect")
        digest = r.tpm2b("attested.quote.pcrDigest", 64)
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


@dataclass(frozen=True)
class Signature:
    """A parsed TPMT_SIGNATURE. `sig` is the RSA signature, or `r`/`s` for ECDSA."""

    sig_alg: int
    hash_alg: int
    sig: bytes = b""
    r: bytes = b""
    s: bytes = b""


ECC_SIG_ALGS = {C.ALG_ECDSA, 0x001A, 0x001B, 0x001C}  # ECDSA, ECDAA, SM2, ECSCHNORR


def parse_signature(data: bytes) -> Signature:
    """Parse TPMT_SIGNATURE (as `tpm2_quote -s` writes in its default tss format)."""
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
