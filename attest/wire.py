"""A bounded big-endian reader for TPM wire structures.

Every read checks the remaining length first, so truncated or oversized input raises
`MalformedEvidence` naming the field and offset instead of IndexError or struct.error.
"""

from __future__ import annotations

from attest.errors import MalformedEvidence

# Largest TPM2B we accept anywhere: TPM2B_PUBLIC/TPM2B_ATTEST/RSA-4096 buffers are far below.
MAX_TPM2B_BYTES = 2048


def tpm2b(data: bytes) -> bytes:
    """Marshal `data` as a TPM2B: a big-endian u16 length, then the bytes."""
    return len(data).to_bytes(2, "big") + data


class Reader:
    """Reads TPM marshalled fields from `data`, tracking the offset for error messages."""

    def __init__(self, data: bytes, what: str) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):  # a tuple: faster than a union
            raise MalformedEvidence(what, 0, f"expected bytes, got {type(data).__name__}")
        self.data = bytes(data)
        self.size = len(self.data)
        self.what = what
        self.offset = 0

    def fail(self, field: str, detail: str, offset: int | None = None) -> MalformedEvidence:
        at = self.offset if offset is None else offset
        return MalformedEvidence(f"{self.what}.{field}", at, detail)

    def remaining(self) -> int:
        return self.size - self.offset

    # The readers below are on the chaincode's hot path: checks are inlined on purpose.
    def take(self, n: int, field: str) -> bytes:
        start = self.offset
        end = start + n
        if n < 0 or end > self.size:
            raise self.fail(field, f"needs {n} bytes, only {self.size - start} left")
        self.offset = end
        return self.data[start:end]

    def _int(self, n: int, field: str) -> int:
        start = self.offset
        end = start + n
        if end > self.size:
            raise self.fail(field, f"needs {n} bytes, only {self.size - start} left")
        self.offset = end
        return int.from_bytes(self.data[start:end], "big")

    def u8(self, field: str) -> int:
        return self._int(1, field)

    def u16(self, field: str) -> int:
        return self._int(2, field)

    def u32(self, field: str) -> int:
        return self._int(4, field)

    def u64(self, field: str) -> int:
        return self._int(8, field)

    def tpm2b(self, field: str, max_len: int = MAX_TPM2B_BYTES) -> bytes:
        start = self.offset
        if self.size - start < 2:
            raise self.fail(f"{field}.size", f"needs 2 bytes, only {self.size - start} left")
        size = int.from_bytes(self.data[start : start + 2], "big")
        if size > max_len:
            raise self.fail(f"{field}.size", f"length {size} exceeds the limit {max_len}", start)
        end = start + 2 + size
        if end > self.size:
            raise self.fail(
                f"{field}.buffer",
                f"needs {size} bytes, only {self.size - start - 2} left",
                start + 2,
            )
        self.offset = end
        return self.data[start + 2 : end]

    def end(self) -> None:
        if self.offset != self.size:
            raise self.fail("end", f"{self.remaining()} unexpected trailing bytes")
