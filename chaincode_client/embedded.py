"""The embedded backend of LedgerClient: the in-process engine of `ledger.engine`.

    ledger = EmbeddedLedger.open("var/ledger.sqlite")
    client = EmbeddedClient(ledger, ledger.enroll("Org1MSP", "webapp"))
    receipt = client.submit("CreateLease", json.dumps({...}))

Thread-safe: any number of threads may submit through one client (or several); the orderer
batches their transactions into blocks.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from chaincode_client.interface import (
    VALID,
    ChaincodeEvent,
    EndorsementError,
    LedgerClient,
    LedgerUnavailable,
    Receipt,
    TransactionInvalid,
)
from ledger.engine.core import EmbeddedLedger
from ledger.engine.endorser import (
    NONCE_BYTES,
    LedgerClosed,
    PeersDisagree,
    ProposalRejected,
    make_proposal,
)
from ledger.engine.msp import Identity
from ledger.engine.tx import make_tx_id

COMMIT_TIMEOUT_S = 60.0  # a block commits in milliseconds; this much means the engine is stuck


class EmbeddedClient(LedgerClient):  # explicit, so mypy checks it keeps the interface
    def __init__(
        self,
        ledger: EmbeddedLedger,
        identity: Identity,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        """clock_ns stamps proposals (Fabric's client-set timestamp); tests inject one."""
        self._ledger = ledger
        self._identity = identity
        self._clock_ns = clock_ns
        self._stop = threading.Event()

    @property
    def identity(self) -> Identity:
        return self._identity

    @property
    def engine(self) -> EmbeddedLedger:
        """The engine this client submits to (its owner closes it)."""
        return self._ledger

    def _proposal(self, fn: str, args: tuple[str, ...]) -> tuple[bytes, bytes, str]:
        """(proposal, signature, tx id)."""
        if not all(isinstance(a, str) for a in args):
            raise EndorsementError("every argument must be a string (JSON text)")
        nonce = os.urandom(NONCE_BYTES)
        proposal, signature = make_proposal(
            self._identity, self._ledger.channel, fn, list(args), self._clock_ns(), nonce
        )
        return proposal, signature, make_tx_id(nonce, self._identity.cert_pem)

    def evaluate(self, fn: str, *args: str) -> bytes:
        proposal, signature, _ = self._proposal(fn, args)
        try:
            return self._ledger.evaluate(proposal, signature)
        except ProposalRejected as exc:
            raise EndorsementError(str(exc)) from None
        except LedgerClosed as exc:
            raise LedgerUnavailable(str(exc)) from None

    def submit(self, fn: str, *args: str) -> Receipt:
        return self.submit_async(fn, *args).receipt()

    def submit_async(self, fn: str, *args: str) -> EmbeddedCommit:
        proposal, signature, tx_id = self._proposal(fn, args)
        try:
            future = self._ledger.submit(proposal, signature)
        except ProposalRejected as exc:
            raise EndorsementError(str(exc)) from None
        except (LedgerClosed, PeersDisagree) as exc:  # nothing ordered: retry
            raise LedgerUnavailable(str(exc)) from None
        return EmbeddedCommit(tx_id, future)

    def sign(self, message: bytes) -> bytes:
        return self._identity.sign(message)

    def events(self, start_block: int = 0) -> Iterator[ChaincodeEvent]:
        for event in self._ledger.events(start_block, stop=self._stop):
            yield ChaincodeEvent(event.block_number, event.tx_id, event.name, event.payload)

    def close(self) -> None:
        """Ends this client's event streams; the ledger stays open for other clients."""
        self._stop.set()


@dataclass(frozen=True)
class EmbeddedCommit:
    """PendingCommit of the embedded engine: the engine's future for one transaction."""

    tx_id: str
    _future: Future

    def receipt(self) -> Receipt:
        try:
            result = self._future.result(timeout=COMMIT_TIMEOUT_S)
        except FutureTimeout:
            raise LedgerUnavailable(
                f"transaction {self.tx_id} not committed within {COMMIT_TIMEOUT_S} s"
            ) from None
        except ProposalRejected as exc:  # endorsed in another process, refused there
            raise EndorsementError(str(exc)) from None
        except (LedgerClosed, PeersDisagree) as exc:
            raise LedgerUnavailable(str(exc)) from None
        except Exception as exc:  # the committer failed: the outcome is unknown
            raise LedgerUnavailable(f"commit of {self.tx_id} failed: {exc!r}") from exc
        receipt = Receipt(
            tx_id=result.tx_id,
            block_number=result.block_number,
            validation_code=result.code,
            payload=result.payload if result.code == VALID else b"",
            message="" if result.code == VALID else _explain(result.code),
        )
        if not receipt.valid:
            raise TransactionInvalid(receipt)
        return receipt


def _explain(code: str) -> str:
    return {
        "MVCC_READ_CONFLICT": "a key it read was changed by a transaction committed first",
        "PHANTOM_READ_CONFLICT": "a range it read was changed by a transaction committed first",
        "DUPLICATE_TXID": "a transaction with this id is already committed",
        "ENDORSEMENT_POLICY_FAILURE": "endorsements do not satisfy the endorsement policy",
        "BAD_CREATOR_SIGNATURE": "the creator's signature or certificate is not valid",
    }.get(code, code)
