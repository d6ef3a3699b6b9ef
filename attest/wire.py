"""A bounded big-endian reader for TPM wire structures.

Every read checks the remaining length first, so truncated or oversized input raises
`MalformedEvidence` naming the field and offset instead of IndexError or struct.error.
"""

from __future__ import annotations

from attest.errors import MalformedEvidence

# Largest TPM2B we accept anywhere: TPM2B_PUBLIC/TPM2B_ATTEST/RSA-4096 buffers are far below.
MAX_TPM2B_BYTES = 2048


class Reader:
    """Reads TPM marshalled fields from `data`, tracking the offset for error messages."""

    def __init__(self, data: bytes, what: str) -> None:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise MalformedEvidence(what, 0, f"expected bytes, got {type(data).__name__}")
        self.data = bytes(data)
        self.what = what
        self.offset = 0

    def fail(self, field: str, detail: str, offset: int | None = None) -> MalformedEvidence:
        at = self.offset if offset is None else offset
        return MalformedEvidence(f"{self.what}.{field}", at, detail)

    def remaining(self) -> int:
        return len(self.data) - self.offset

    def take(self, n: int, field: str) -> bytes:
        if n < 0 or n > self.remaining():
            raise self.fail(field, f"needs {n} bytes, only {self.remaining()} left")
        chunk = self.data[self.offset : self.offset + n]
        self.offset += n
        return chunk

    def u8(self, field: str) -> int:
        return self.take(1, field)[0]

    def u16(self, field: str) -> int:
        return int.from_bytes(self.take(2, field), "big")

    def u32(self, field: str) -> int:
        return int.from_bytes(self.take(4, field), "big")

    def u64(self, field: str) -> int:
        return int.from_bytes(self.take(8, field), "big")

    def tpm2b(self, field: str, max_len: int = MAX_TPM2B_BYTES) -> bytes:
        start = self.offset
        size = self.u16(f"{field}.size")
        if size > max_len:
            raise self.fail(f"{field}.size", f"length {size} exceeds the limit {max_len}", start)
        return self.take(size, f"{field}.buffer")

    def end(self) -> None:
        if self.remaining():
            raise self.fail("end", f"{self.remaining()} unexpected trailing bytes")
