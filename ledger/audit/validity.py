"""Which of a receipt's transactions are valid, derived from what the receipt proves.

A block's validation codes (an embedded receipt's `code`, a Fabric block's TRANSACTIONS_FILTER
metadata) are written by the committing peer after ordering, and nothing signs or hashes them:
the embedded block hash covers the envelopes only, and a Fabric orderer signs the header and
its own metadata, never the filter, which does not exist yet when it signs. Whoever hands out
a receipt can relabel a transaction the block marked MVCC_READ_CONFLICT as VALID. So the
auditor takes a code as a claim and re-derives MVCC from what the endorsers signed: each
transaction's read set names the version (block, transaction) of every key it read, and a
transaction is valid only where those versions are still current when it commits.

The lease's own keys (its record and its settlement lines) are written only by transactions
a receipt holds (the exporters take every writer of them), so their versions must form one
chain: each read names exactly the last write the receipt shows before it (none: absent). A
read that names an older version is stale (the transaction was MVCC-invalid, whatever the
code says); one that names a write the receipt does not show means the receipt left a
transaction out. For any other key the receipt shows only some writers, so only the stale
case is provable: a read older than a write the receipt shows before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ledger.contract.state import LEASE, settlements_prefix

Version = tuple[int, int]  # (block number, transaction number in the block): Fabric's height

REASON_MVCC = "receipt.mvcc_read_conflict"
REASON_MISSING_WRITE = "receipt.missing_write"
REASON_FUTURE_READ = "receipt.future_read"
REASON_DUPLICATE_TX = "receipt.duplicate_txid"


@dataclass(frozen=True)
class ChainTx:
    """One transaction the receipt claims VALID, as its endorsers signed it."""

    tx_id: str
    at: Version  # where the receipt places it
    reads: dict[str, Version | None]  # key -> the version read (None: the key was absent)
    writes: dict[str, bytes | None]  # key -> value (None: deleted)


def chain_defects(txs: Iterable[ChainTx], lease_id: str) -> list[str]:
    """A defect, with its reason code, for every transaction claimed VALID that the receipt
    shows was not (a stale read, a duplicate transaction id) or that reads a write of the
    lease's keys the receipt leaves out. Writes of a transaction found invalid do not count."""
    lease_key, lines = LEASE + lease_id, settlements_prefix(lease_id)

    def chained(key: str) -> bool:
        return key == lease_key or key.startswith(lines)

    last: dict[str, tuple[Version, bool]] = {}  # key -> (latest write shown, it deleted)
    seen: set[str] = set()
    defects: list[str] = []
    for tx in sorted(txs, key=lambda t: t.at):
        where = f"block {tx.at[0]} tx {tx.at[1]} ({tx.tx_id})"
        if tx.tx_id in seen:
            defects.append(f"{where}: [{REASON_DUPLICATE_TX}] its id is committed before")
            continue
        problem = _read_problem(tx, last, chained)
        if problem:
            defects.append(f"{where}: {problem}; the receipt calls it VALID")
            continue
        seen.add(tx.tx_id)
        for key, value in tx.writes.items():
            last[key] = (tx.at, value is None)
    return defects


def _read_problem(
    tx: ChainTx, last: dict[str, tuple[Version, bool]], chained: Callable[[str], bool]
) -> str | None:
    for key, version in tx.reads.items():
        if version is not None and tuple(version) >= tx.at:
            return f"[{REASON_FUTURE_READ}] reads {key!r} at {version}, not before itself"
        shown = last.get(key)
        if shown is None:
            if chained(key) and version is not None:
                return (
                    f"[{REASON_MISSING_WRITE}] reads {key!r} at {version}, "
                    "a write the receipt does not show"
                )
            continue
        wrote_at, deleted = shown
        if chained(key) and version is not None and tuple(version) > wrote_at:
            return (
                f"[{REASON_MISSING_WRITE}] reads {key!r} at {version}, "
                "a write the receipt does not show"
            )
        current = None if deleted else wrote_at
        stale = (
            version != current
            if chained(key)
            else version is not None and tuple(version) < wrote_at
        )
        if stale:
            return (
                f"[{REASON_MVCC}] reads {key!r} at {version}, but the receipt shows it "
                f"written at {wrote_at} before"
            )
    return None
