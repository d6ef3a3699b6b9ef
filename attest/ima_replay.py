"""Replay IMA's PCR 10 from parsed measurement-list entries, incrementally: a ledger keeps
an `ImaState` (entries replayed, PCR values) per boot, and each quote brings only the entries
since the last one (`replay_ima`), so a quote's cost stays flat; `match_quote` finds how many
of them the quote covers (the list is read after the quote, so it may hold more).

What each bank of PCR 10 is extended with depends on the kernel (ima_queue.c):
- Linux >= 5.8 (the default here): each bank with a hash the kernel implements gets the
  template data hashed with that bank's algorithm; a violation extends all ones.
- Linux < 5.8 (`legacy_sha1_padding=True`): every bank gets the SHA-1 template digest,
  zero-padded to the bank's size; a violation extends 20 bytes of ones, zero-padded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from attest import tpm_constants as C
from attest.eventlog_replay import Finding, PcrValues
from attest.ima import ASCII, IMA_PCR, ImaEntry, ima_error, parse_ima

_HEX_TEXT = re.compile(r"(?:[0-9a-f]{2})+").fullmatch


@dataclass(frozen=True)
class ImaState:
    """Where a replay stands: `count` entries replayed; `values`: PCR -> {alg: value} for
    every PCR they extended (an absent PCR is at its reset value, zeros)."""

    count: int = 0
    banks: tuple[int, ...] = (C.ALG_SHA1, C.ALG_SHA256)
    values: Mapping[int, Mapping[int, bytes]] = field(default_factory=dict)

    def value(self, alg: int, pcr: int = IMA_PCR) -> bytes:
        return self.values.get(pcr, {}).get(alg, bytes(C.DIGEST_SIZES[alg]))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form a ledger keeps between quotes."""
        return {
            "count": self.count,
            "pcrs": {
                str(pcr): {C.HASH_NAMES[alg]: v.hex() for alg, v in sorted(banks.items())}
                for pcr, banks in sorted(self.values.items())
            },
            "banks": [C.HASH_NAMES[alg] for alg in self.banks],
        }

    @classmethod
    def from_dict(cls, doc: Any) -> ImaState:
        """Strict: a stored state that is not one raises ValueError, never passes as one."""
        if not isinstance(doc, dict) or set(doc) != {"count", "pcrs", "banks"}:
            raise ValueError("an IMA state is an object with count, pcrs and banks")
        count, banks = doc["count"], doc["banks"]
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValueError("IMA state count must be a non-negative integer")
        if not isinstance(banks, list) or not banks or any(b not in C.HASH_IDS for b in banks):
            raise ValueError("IMA state banks must be a list of known bank names")
        values: dict[int, dict[int, bytes]] = {}
        for key, pcr_values in (doc["pcrs"] if isinstance(doc["pcrs"], dict) else {}).items():
            pcr = int(key) if isinstance(key, str) and key.isdigit() else -1
            if not 0 <= pcr < C.PCR_COUNT or not isinstance(pcr_values, dict):
                raise ValueError(f"IMA state PCR {key!r} is not a PCR index")
            values[pcr] = {}
            for bank, value in pcr_values.items():
                alg = C.HASH_IDS.get(bank)
                raw = bytes.fromhex(value) if isinstance(value, str) and _HEX_TEXT(value) else b""
                if alg is None or bank not in banks or len(raw) != C.DIGEST_SIZES[alg]:
                    raise ValueError(f"IMA state PCR {pcr} {bank!r} value is not a digest")
                values[pcr][alg] = raw
        return cls(count, tuple(C.HASH_IDS[b] for b in banks), values)


def bank_digest(entry: ImaEntry, alg: int, legacy_sha1_padding: bool = False) -> bytes:
    """What the kernel extends into bank `alg` for `entry` (see the module docstring)."""
    size = C.DIGEST_SIZES[alg]
    if entry.violation:
        return b"\xff" * size if not legacy_sha1_padding else (b"\xff" * 20).ljust(size, b"\0")
    if alg == C.ALG_SHA1 and len(entry.template_hash) == 20:
        return entry.template_hash
    if legacy_sha1_padding:
        return C.hash_bytes(C.ALG_SHA1, entry.hashed).ljust(size, b"\x00")
    return C.hash_bytes(alg, entry.hashed)


def extend(
    state: ImaState, entries: Sequence[ImaEntry], legacy_sha1_padding: bool = False
) -> ImaState:
    """Continue the replay from `state` with the entries that follow it."""
    values = {pcr: dict(banks) for pcr, banks in state.values.items()}
    for i, entry in enumerate(entries):
        if entry.index != state.count + i:
            raise ima_error(
                "ima.not_contiguous",
                f"entries[{entry.index}]",
                0,
                f"entry {entry.index} where entry {state.count + i} was expected",
            )
        banks = values.setdefault(entry.pcr, {})
        for alg in state.banks:
            old = banks.get(alg, bytes(C.DIGEST_SIZES[alg]))
            banks[alg] = C.hash_bytes(alg, old + bank_digest(entry, alg, legacy_sha1_padding))
    return ImaState(state.count + len(entries), state.banks, values)


def replay_ima(
    data: bytes, state: ImaState | None = None, fmt: str = ASCII, legacy_sha1_padding: bool = False
) -> tuple[ImaState, tuple[ImaEntry, ...]]:
    """Parse the entries after `state` (the tail the agent sent) and continue the replay:
    a quote's cost is that of its new entries only."""
    state = state or ImaState()
    entries = parse_ima(data, fmt, start=state.count)
    return extend(state, entries, legacy_sha1_padding), entries


@dataclass(frozen=True)
class ImaMatch:
    """`covered`: how many of the new entries the quote covers (the list is read after the
    quote, so it may hold more); `state`: the replay after them, to keep for the next quote."""

    covered: int
    state: ImaState
    finding: Finding | None = None

    @property
    def ok(self) -> bool:
        return self.finding is None


def match_quote(
    state: ImaState,
    entries: Sequence[ImaEntry],
    quoted: PcrValues,
    pcr: int = IMA_PCR,
    legacy_sha1_padding: bool = False,
) -> ImaMatch:
    """The shortest prefix of `entries` after which PCR `pcr` of every quoted bank equals the
    quote (`Verdict.pcr_values`); `ima.replay_mismatch` when none does."""
    quoted_banks = [
        (C.HASH_IDS[bank], values[pcr])
        for bank, values in quoted.items()
        if bank in C.HASH_IDS and pcr in values
    ]
    missing = [C.HASH_NAMES[alg] for alg, _ in quoted_banks if alg not in state.banks]
    if not quoted_banks or missing:
        detail = f"bank {missing[0]} is not replayed" if missing else f"PCR {pcr} is not quoted"
        return ImaMatch(0, state, Finding("ima.bank_not_tracked", detail, pcr))
    current = {alg: state.value(alg, pcr) for alg, _ in quoted_banks}
    for k in range(len(entries) + 1):
        if all(current[alg] == value for alg, value in quoted_banks):
            return ImaMatch(k, extend(state, entries[:k], legacy_sha1_padding))
        if k < len(entries) and entries[k].pcr == pcr:
            for alg in current:
                digest = bank_digest(entries[k], alg, legacy_sha1_padding)
                current[alg] = C.hash_bytes(alg, current[alg] + digest)
    alg, value = next((a, v) for a, v in quoted_banks if current[a] != v)
    last = f"entry {entries[-1].index} ({entries[-1].path})" if entries else "no new entry"
    detail = (
        f"PCR {pcr} ({C.HASH_NAMES[alg]}): no prefix of the {len(entries)} new entries after "
        f"entry {state.count - 1} replays to the quoted {value.hex()}; the last is {last}"
    )
    finding = Finding(
        "ima.replay_mismatch",
        detail,
        pcr,
        C.HASH_NAMES[alg],
        entries[-1].index if entries else None,
    )
    return ImaMatch(0, state, finding)
