"""The PCR files tpm2-tools 5.4 writes (`tpm2_quote -o`, `tpm2_pcrread -o`).

Two formats (`-F`):
- `serialized` (tpm2_quote's default): the C structs dumped in host byte order (little-endian
  on x86-64/arm64): TPML_PCR_SELECTION (4 + 16 * 8 bytes, each TPMS_PCR_SELECTION padded to
  8), a UINT32 count of TPML_DIGESTs, then that many TPML_DIGEST (4 + 8 * (2 + 64) bytes).
- `values` (tpm2_pcrread's default): the digests concatenated in selection order; the
  selection must come from elsewhere (the quote).
Values are listed bank by bank, each bank's PCRs ascending, as the TPM returns them.
"""

from __future__ import annotations

from attest import tpm_constants as C
from attest.errors import MalformedEvidence
from attest.structs import Selection
from attest.wire import Reader

PcrValues = dict[str, dict[int, bytes]]  # {"sha256": {0: digest, 2: digest}}

SEL_STRUCT_BYTES = 8  # TPMS_PCR_SELECTION {UINT16, UINT8, BYTE[4]} padded to 2-byte alignment
TPML_PCR_SELECTION_BYTES = 4 + C.MAX_PCR_BANKS * SEL_STRUCT_BYTES
DIGESTS_PER_TPML = 8  # TPML_DIGEST holds at most 8 digests
TPM2B_DIGEST_BYTES = 2 + 64
TPML_DIGEST_BYTES = 4 + DIGESTS_PER_TPML * TPM2B_DIGEST_BYTES
MAX_TPML_DIGESTS = C.MAX_PCR_BANKS * C.PCR_COUNT // DIGESTS_PER_TPML


def _le(r: Reader, n: int, field: str) -> int:
    return int.from_bytes(r.take(n, field), "little")


def _serialized_selection(r: Reader) -> Selection:
    count = _le(r, 4, "pcrSelect.count")
    if count > C.MAX_PCR_BANKS:
        raise r.fail("pcrSelect.count", f"{count} banks exceeds {C.MAX_PCR_BANKS}", 0)
    banks = []
    for i in range(C.MAX_PCR_BANKS):
        at = r.offset
        alg = _le(r, 2, f"pcrSelect[{i}].hash")
        size = r.u8(f"pcrSelect[{i}].sizeofSelect")
        bitmap = r.take(C.MAX_PCR_SELECT_BYTES, f"pcrSelect[{i}].pcrSelect")
        r.take(1, f"pcrSelect[{i}].padding")
        if i >= count:
            continue
        if alg not in C.HASH_ALGS or any(alg == a for a, _ in banks):
            raise r.fail(f"pcrSelect[{i}].hash", f"bad or repeated bank {alg:#06x}", at)
        if not 1 <= size <= C.MAX_PCR_SELECT_BYTES:
            raise r.fail(f"pcrSelect[{i}].sizeofSelect", f"invalid size {size}", at + 2)
        pcrs = frozenset(b * 8 + k for b in range(size) for k in range(8) if bitmap[b] >> k & 1)
        banks.append((alg, pcrs))
    return tuple(banks)


def _serialized_digests(r: Reader) -> list[bytes]:
    count_at = r.offset
    count = _le(r, 4, "pcrs.count")
    if count > MAX_TPML_DIGESTS:
        raise r.fail("pcrs.count", f"{count} digest lists exceeds {MAX_TPML_DIGESTS}", count_at)
    digests: list[bytes] = []
    for i in range(count):
        list_at = r.offset
        n = _le(r, 4, f"pcrs[{i}].count")
        if n > DIGESTS_PER_TPML:
            raise r.fail(f"pcrs[{i}].count", f"{n} digests exceeds {DIGESTS_PER_TPML}", list_at)
        for j in range(DIGESTS_PER_TPML):
            size_at = r.offset
            size = _le(r, 2, f"pcrs[{i}][{j}].size")
            buf = r.take(64, f"pcrs[{i}][{j}].buffer")
            if j >= n:
                continue
            if size > 64:
                raise r.fail(f"pcrs[{i}][{j}].size", f"digest size {size} > 64", size_at)
            digests.append(buf[:size])
    return digests


def _assign(selection: Selection, digests: list[bytes], what: str) -> PcrValues:
    wanted = sum(len(pcrs) for _, pcrs in selection)
    if wanted != len(digests):
        raise MalformedEvidence(what, 0, f"{len(digests)} values for {wanted} selected PCRs")
    out: PcrValues = {}
    it = iter(digests)
    for alg, pcrs in selection:
        bank = out.setdefault(C.HASH_NAMES[alg], {})
        for pcr in sorted(pcrs):
            value = next(it)
            if len(value) != C.DIGEST_SIZES[alg]:
                raise MalformedEvidence(
                    what, 0, f"{C.HASH_NAMES[alg]} PCR {pcr} value is {len(value)} bytes"
                )
            bank[pcr] = value
    return out


def is_serialized(data: bytes) -> bool:
    """True when the length fits the serialized layout (a values file never does: its length
    is a sum of digest sizes, and 136 + 532k is not one for any realistic selection)."""
    body = len(data) - TPML_PCR_SELECTION_BYTES - 4
    return body >= 0 and body % TPML_DIGEST_BYTES == 0


def parse_pcr_file(data: bytes, selection: Selection | None = None) -> PcrValues:
    """Parse a PCR file in either format. `selection` is required for the `values` format and,
    for the serialized one, must equal the file's own selection when given."""
    if is_serialized(data):
        r = Reader(data, "PCR file (serialized)")
        own = _serialized_selection(r)
        digests = _serialized_digests(r)
        r.end()
        if selection is not None and _canon(selection) != _canon(own):
            raise MalformedEvidence("PCR file.pcrSelect", 0, "differs from the quote's selection")
        return _assign(own, digests, "PCR file (serialized)")
    if selection is None:
        raise MalformedEvidence("PCR file", 0, "values format needs the quote's PCR selection")
    r = Reader(data, "PCR file (values)")
    digests = [
        r.take(C.DIGEST_SIZES[alg], f"{C.HASH_NAMES[alg]}[{pcr}]")
        for alg, pcrs in selection
        for pcr in sorted(pcrs)
    ]
    r.end()
    return _assign(selection, digests, "PCR file (values)")


def _canon(selection: Selection) -> dict[int, frozenset[int]]:
    return {alg: pcrs for alg, pcrs in selection if pcrs}
