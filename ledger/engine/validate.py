"""Block validation, the same code for the committer and for `ledger verify`'s replay."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass

from ledger.engine.msp import ChannelMsp
from ledger.engine.tx import (
    BAD_PAYLOAD,
    DUPLICATE_TXID,
    VALID,
    EndorsementPolicy,
    StateVersions,
    Transaction,
    Version,
    check_mvcc,
    check_signatures,
    decode_envelope,
)


@dataclass
class Validated:
    txnum: int
    envelope: bytes
    code: str
    tx: Transaction | None  # None when the envelope did not even parse


class BlockView:
    """The state as seen by transaction n of a block: committed state plus the writes of the
    block's earlier valid transactions (Fabric validates in order within a block)."""

    def __init__(
        self,
        version_of: Callable[[str], Version | None],
        range_of: Callable[[str, str], list[tuple[str, Version]]],
        number: int,
    ) -> None:
        self._version_of = version_of
        self._range_of = range_of
        self._number = number
        self.pending: dict[str, tuple[bytes | None, Version]] = {}

    def version(self, key: str) -> Version | None:
        if key in self.pending:
            value, version = self.pending[key]
            return None if value is None else version
        return self._version_of(key)

    def range_versions(self, start: str, end: str) -> list[tuple[str, Version]]:
        rows = dict(self._range_of(start, end))
        for key, (value, version) in self.pending.items():
            if start <= key < end:
                if value is None:
                    rows.pop(key, None)
                else:
                    rows[key] = version
        return sorted(rows.items())

    def apply(self, txnum: int, writes: dict[str, bytes | None]) -> None:
        for key, value in writes.items():
            self.pending[key] = (value, (self._number, txnum))


def validate_block(
    envelopes: list[bytes],
    view: BlockView,
    msp: ChannelMsp,
    policy: EndorsementPolicy,
    committed: Callable[[str], bool],
    signature_codes: list[str | None] | None = None,
) -> list[Validated]:
    """Validation codes for a block's transactions, in order; valid writes go into view.
    signature_codes, when given, are precomputed results of check_signatures."""
    out: list[Validated] = []
    seen: set[str] = set()
    for txnum, envelope in enumerate(envelopes):
        try:
            tx = decode_envelope(envelope)
        except ValueError:
            out.append(Validated(txnum, envelope, BAD_PAYLOAD, None))
            continue
        if signature_codes is not None:
            code = signature_codes[txnum]
        else:
            code = check_signatures(tx, msp, policy)
        if code is None and (tx.tx_id in seen or committed(tx.tx_id)):
            code = DUPLICATE_TXID
        if code is None:
            code = check_mvcc(tx.rwset, view)
        if code is None:
            code = VALID
            view.apply(txnum, tx.rwset.writes)
            seen.add(tx.tx_id)
        out.append(Validated(txnum, envelope, code, tx))
    return out


class DictState:
    """World state as a plain dict (the auditor's replay), with sorted keys for ranges."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[bytes, Version]] = {}
        self._sorted: list[str] | None = None

    def version(self, key: str) -> Version | None:
        found = self.values.get(key)
        return found[1] if found else None

    def range(self, start: str, end: str) -> list[tuple[str, Version]]:
        if self._sorted is None:
            self._sorted = sorted(self.values)
        lo = bisect.bisect_left(self._sorted, start)
        hi = bisect.bisect_left(self._sorted, end)
        return [(k, self.values[k][1]) for k in self._sorted[lo:hi]]

    range_versions = range  # the StateVersions protocol's name

    def apply(self, number: int, txnum: int, writes: dict[str, bytes | None]) -> None:
        self._sorted = None
        for key, value in writes.items():
            if value is None:
                self.values.pop(key, None)
            else:
                self.values[key] = (value, (number, txnum))


__all__ = ["BlockView", "DictState", "StateVersions", "Validated", "validate_block"]
