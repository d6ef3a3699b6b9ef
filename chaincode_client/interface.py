"""The one ledger client interface every backend implements and the web app uses.

Arguments and results are strings/bytes exactly as Fabric carries them: the contract's
functions take JSON strings and return JSON bytes. A submit returns a Receipt only once the
transaction is committed (valid or not); faults that leave the outcome unknown raise
LedgerUnavailable so the caller (the outbox relay) retries with the same business key.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

VALID = "VALID"


@dataclass(frozen=True)
class Receipt:
    tx_id: str
    block_number: int
    validation_code: str  # Fabric's TxValidationCode name: VALID, MVCC_READ_CONFLICT, ...
    payload: bytes = b""  # the contract's return value
    message: str = ""  # why the transaction was rejected, when it was

    @property
    def valid(self) -> bool:
        return self.validation_code == VALID


@dataclass(frozen=True)
class ChaincodeEvent:
    block_number: int
    tx_id: str
    name: str
    payload: bytes


class LedgerError(Exception):
    """Base class of everything a ledger client raises."""


class LedgerUnavailable(LedgerError):
    """The ledger could not be reached or did not answer; the outcome is unknown: retry."""


class PeersBehind(LedgerUnavailable):
    """The client's own organisation's peer endorsed the proposal and another organisation's
    peer refused it: that peer has most likely not yet received the block of the client's
    previous commit (a row's prerequisite). Nothing was ordered; retry soon. A peer whose
    orderer went away is behind until its delivery client notices and reconnects."""


# A refusal's reason code: the first `[code]` in its message (the contract and the embedded
# engine tag their refusals), so tests and callers match a code both backends carry, never
# one backend's wording.
REASON_RE = re.compile(r"\[([a-z][a-z0-9_.]*)\]")
REASON_CONTRACT = "contract"  # a business rule without a code of its own
REASON_CREATOR = "creator"  # the submitter's identity is not one the channel accepts
REASON_TOO_LARGE = "too_large"  # the proposal or an argument is over its size limit


class EndorsementError(LedgerError):
    """The contract refused the proposal (bad arguments, business rule) or the endorsing
    organisations disagreed. Carries the peer's message; retrying the same input fails again.
    `reason` is the refusal's code (see REASON_RE)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        found = REASON_RE.search(message)
        self.reason = reason or (found.group(1) if found else REASON_CONTRACT)


class TransactionInvalid(LedgerError):
    """The transaction was ordered but marked invalid at commit (e.g. MVCC_READ_CONFLICT)."""

    def __init__(self, receipt: Receipt) -> None:
        super().__init__(
            f"transaction {receipt.tx_id} invalid: {receipt.validation_code}"
            + (f" ({receipt.message})" if receipt.message else "")
        )
        self.receipt = receipt


class PendingCommit(Protocol):
    """A transaction endorsed and handed to the orderer, its commit still to come (Fabric
    Gateway's submit_async). Keeping many pending is how one client reaches a ledger's
    throughput: blocks fill while earlier transactions commit."""

    @property
    def tx_id(self) -> str: ...

    def receipt(self) -> Receipt:
        """Wait for the commit; the receipt's payload is the contract's return value.
        Raises TransactionInvalid when the transaction was marked invalid, LedgerUnavailable
        when its outcome cannot be learnt (retry by business key), and EndorsementError
        where the backend endorses asynchronously and the proposal was refused."""
        ...


class LedgerClient(Protocol):
    def evaluate(self, fn: str, *args: str) -> bytes:
        """Run a query on one peer; nothing is ordered or committed."""
        ...

    def submit(self, fn: str, *args: str) -> Receipt:
        """Endorse, order and wait for commit. Raises EndorsementError when the proposal is
        refused, TransactionInvalid when the committed transaction was marked invalid."""
        ...

    def submit_async(self, fn: str, *args: str) -> PendingCommit:
        """Hand the transaction on without waiting for its commit; the outcome comes from
        PendingCommit.receipt(). Raises EndorsementError here when the proposal is refused
        while this call endorses it (Fabric's gateway, the embedded engine in-process); an
        engine that endorses in other processes reports a refusal from receipt()."""
        ...

    def events(self, start_block: int = 0) -> Iterator[ChaincodeEvent]:
        """Chaincode events of committed valid transactions, replayed from start_block."""
        ...

    def sign(self, message: bytes) -> bytes:
        """ECDSA-SHA256 (DER) by this client's identity, the transactions' creator (an
        AK certificate signed so counts for nothing: registrars have keys of their own,
        attest.registrar)."""
        ...

    def close(self) -> None: ...
