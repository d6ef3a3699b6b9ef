"""Single-use attestation nonces with a time to live.

`NonceRegistry` issues random nonces and consumes each at most once; a replayed, expired or
unknown nonce is refused with a reason. Storage is a small protocol so the web app can keep
nonces in its database (a conditional delete makes consumption atomic there); the in-memory
store serves the CLI, the tests and single-process use.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

NONCE_TTL_S = 120  # an agent answers a challenge in seconds; two minutes is generous
NONCE_BYTES = 32  # SHA-256-sized extraData
MAX_OUTSTANDING_NONCES = 100_000  # bound memory if challenges are never answered


@dataclass(frozen=True)
class NonceRecord:
    nonce: bytes
    subject: str  # whom the nonce was issued to (node id); a nonce is not transferable
    expires_at: float  # seconds on the registry's clock


@dataclass(frozen=True)
class NonceCheck:
    """Result of consuming a nonce: ok, or a reason code and sentence."""

    ok: bool
    code: str = "ok"
    detail: str = ""


class NonceStore(Protocol):
    def put(self, record: NonceRecord) -> None: ...

    def take(self, nonce: bytes) -> NonceRecord | None:
        """Remove and return the record atomically; None if absent (unknown or consumed)."""

    def was_consumed(self, nonce: bytes) -> bool: ...

    def purge_expired(self, now: float) -> int: ...


class MemoryNonceStore:
    """Thread-safe in-memory store; remembers consumed nonces until they would have expired."""

    def __init__(self) -> None:
        self._live: dict[bytes, NonceRecord] = {}
        self._spent: dict[bytes, float] = {}
        self._lock = threading.Lock()

    def put(self, record: NonceRecord) -> None:
        with self._lock:
            if len(self._live) >= MAX_OUTSTANDING_NONCES:
                raise OverflowError(f"more than {MAX_OUTSTANDING_NONCES} outstanding nonces")
            self._live[record.nonce] = record

    def take(self, nonce: bytes) -> NonceRecord | None:
        with self._lock:
            record = self._live.pop(nonce, None)
            if record is not None:
                self._spent[nonce] = record.expires_at
            return record

    def was_consumed(self, nonce: bytes) -> bool:
        with self._lock:
            return nonce in self._spent

    def purge_expired(self, now: float) -> int:
        with self._lock:
            dead = [n for n, r in self._live.items() if r.expires_at <= now]
            for n in dead:
                del self._live[n]
            for n in [n for n, exp in self._spent.items() if exp <= now]:
                del self._spent[n]
            return len(dead)


class NonceRegistry:
    def __init__(
        self,
        store: NonceStore | None = None,
        ttl_s: float = NONCE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        self.store = store if store is not None else MemoryNonceStore()
        self.ttl_s = ttl_s
        self.clock = clock

    def issue(self, subject: str) -> bytes:
        now = self.clock()
        self.store.purge_expired(now)
        nonce = secrets.token_bytes(NONCE_BYTES)
        self.store.put(NonceRecord(nonce, subject, now + self.ttl_s))
        return nonce

    def consume(self, nonce: bytes, subject: str) -> NonceCheck:
        """Accept `nonce` once, for the subject it was issued to, before it expires."""
        if not isinstance(nonce, bytes) or len(nonce) != NONCE_BYTES:
            return NonceCheck(False, "nonce_unknown", "nonce has the wrong type or length")
        record = self.store.take(nonce)
        if record is None:
            if self.store.was_consumed(nonce):
                return NonceCheck(False, "nonce_replayed", "nonce was already used")
            return NonceCheck(False, "nonce_unknown", "nonce was never issued or has expired")
        if self.clock() >= record.expires_at:
            return NonceCheck(False, "nonce_expired", f"nonce older than {self.ttl_s} s")
        if not secrets.compare_digest(record.subject.encode(), subject.encode()):
            return NonceCheck(False, "nonce_wrong_subject", "nonce was issued to another node")
        return NonceCheck(True)
