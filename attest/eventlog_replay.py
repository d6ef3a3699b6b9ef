"""Replay a parsed measured-boot log and compare it with quoted PCR values.

Replay recomputes each PCR per bank as the TPM did: start from the PCR's reset value (PCR 0
starts at the StartupLocality, 0...03 or 0...04; PCRs 17-22 at all ones), then
PCR := H(PCR || digest) for every event of that PCR in log order; EV_NO_ACTION events are
not extended. `compare` then says, with reason codes:

- `eventlog.event_digest_mismatch`: an event whose digest is defined as the hash of its own
  data (separators, EV_EFI_ACTION strings, UEFI variable configuration, the GPT, the S-CRTM
  version) carries data that does not hash to it: the data was altered after measurement;
- `eventlog.bank_not_in_log`: a quoted bank the log does not carry;
- `eventlog.pcr_not_in_log`: a quoted PCR no event extends;
- `eventlog.replay_mismatch`: the replayed value differs from the quoted one; the finding
  names the PCR, the bank and the last event extended into it.

Findings come in that order: digest findings by event, then PCRs in ascending order (banks
in the Spec ID's order); `first` is the one to report. A log that compares clean proves the
digests of every event of the compared PCRs are what the TPM extended, in that order; it
proves nothing about event data outside the digest-bound types above (an image's device
path, an EV_IPL string, a firmware blob's address), which a policy must not trust.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from attest import efi_events as E
from attest import tpm_constants as C
from attest.eventlog import Event, EventLog
from attest.verdict import Reason

DRTM_PCRS = range(17, 23)  # reset to all ones; only a dynamic launch resets them to zero
# Event types whose digest is the hash of the event data itself (PFP 1.05, 10.4)
DATA_BOUND_TYPES = frozenset(
    {
        E.EV_SEPARATOR,
        E.EV_EFI_ACTION,
        E.EV_S_CRTM_VERSION,
        E.EV_EFI_VARIABLE_DRIVER_CONFIG,
        E.EV_EFI_VARIABLE_AUTHORITY,
        E.EV_EFI_VARIABLE_BOOT,  # either hash: see _expected_digests
        E.EV_EFI_VARIABLE_BOOT2,
        E.EV_EFI_GPT_EVENT,
    }
)

# PCR values as the verifier reports them (Verdict.pcr_values): bank name -> {PCR: value}
PcrValues = Mapping[str, Mapping[int, bytes]]


@dataclass(frozen=True)
class Finding:
    """Why a log does not explain a quote; `event` is the index of the event to blame."""

    code: str
    detail: str
    pcr: int | None = None
    bank: str | None = None
    event: int | None = None

    def reason(self) -> Reason:
        return Reason(self.code, self.detail)


@dataclass(frozen=True)
class ReplayResult:
    """`replayed`: bank -> {PCR: value} for every PCR the log extends (known banks only)."""

    findings: tuple[Finding, ...]
    replayed: dict[str, dict[int, bytes]]

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def first(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def reasons(self) -> list[Reason]:
        return [f.reason() for f in self.findings]


def initial_value(pcr: int, size: int, locality: int = 0) -> bytes:
    """A PCR's value after TPM2_Startup(CLEAR) at `locality` (PC Client PTP, 4.6)."""
    if pcr in DRTM_PCRS:
        return b"\xff" * size
    if pcr == 0 and locality:
        return bytes(size - 1) + bytes([locality])
    return bytes(size)


def replay(log: EventLog) -> tuple[dict[str, dict[int, bytes]], dict[tuple[str, int], int]]:
    """(bank -> {PCR: value}, (bank, PCR) -> index of the last event extended into it).
    Banks whose hash this library does not implement are skipped."""
    values: dict[str, dict[int, bytes]] = {}
    last: dict[tuple[str, int], int] = {}
    for event in log.events:
        if event.type == E.EV_NO_ACTION:
            continue
        for alg, digest in event.digests:
            bank = C.HASH_NAMES.get(alg)
            if bank is None:
                continue
            pcrs = values.setdefault(bank, {})
            old = pcrs.get(event.pcr)
            if old is None:
                old = initial_value(event.pcr, len(digest), log.startup_locality)
            pcrs[event.pcr] = C.hash_bytes(alg, old + digest)
            last[bank, event.pcr] = event.index
    return values, last


def _expected_digests(event: Event, alg: int) -> tuple[bytes, ...]:
    digests: tuple[bytes, ...] = (C.hash_bytes(alg, event.data),)
    if event.type == E.EV_EFI_VARIABLE_BOOT and isinstance(event.decoded, E.UefiVariable):
        # EDK2 measures only VariableData of Boot#### and BootOrder; PFP 1.05 says the whole
        # UEFI_VARIABLE_DATA. Either is the hash of this event's own bytes.
        digests += (C.hash_bytes(alg, event.decoded.data),)
    return digests


def digest_findings(log: EventLog) -> list[Finding]:
    """Events of the data-bound types whose digests are not the hash of their data."""
    out = []
    for event in log.events:
        if event.type not in DATA_BOUND_TYPES:
            continue
        for alg, digest in event.digests:
            if alg in C.HASH_NAMES and digest not in _expected_digests(event, alg):
                bank = C.HASH_NAMES[alg]
                out.append(
                    Finding(
                        "eventlog.event_digest_mismatch",
                        f"{event.describe()}: its {bank} digest is not the hash of its data: "
                        "the event was altered after it was measured",
                        event.pcr,
                        bank,
                        event.index,
                    )
                )
                break
    return out


def compare(log: EventLog, quoted: PcrValues, pcrs: Iterable[int] | None = None) -> ReplayResult:
    """Check `log` against the quoted PCR values (the verifier's `Verdict.pcr_values`:
    authenticated ones). `pcrs` limits the comparison (PCR 10, IMA's, is not the boot
    log's); by default every quoted PCR is compared."""
    replayed, last = replay(log)
    findings = digest_findings(log)
    wanted = None if pcrs is None else frozenset(pcrs)
    order = {C.HASH_NAMES.get(alg): i for i, alg in enumerate(log.spec_id.banks)}
    pcr_findings: list[tuple[int, int, Finding]] = []
    for bank in quoted:
        if bank not in order:
            findings.append(
                Finding("eventlog.bank_not_in_log", f"the log carries no {bank} bank", bank=bank)
            )
            continue
        for pcr in sorted(quoted[bank]):
            if wanted is not None and pcr not in wanted:
                continue
            finding = _compare_pcr(bank, pcr, quoted[bank][pcr], replayed, last, log)
            if finding is not None:
                pcr_findings.append((pcr, order[bank], finding))
    findings += [f for _, _, f in sorted(pcr_findings, key=lambda t: t[:2])]
    return ReplayResult(tuple(findings), replayed)


def _compare_pcr(
    bank: str,
    pcr: int,
    value: bytes,
    replayed: dict[str, dict[int, bytes]],
    last: dict[tuple[str, int], int],
    log: EventLog,
) -> Finding | None:
    got = replayed.get(bank, {}).get(pcr)
    if got is None:
        return Finding(
            "eventlog.pcr_not_in_log",
            f"PCR {pcr} ({bank}) is quoted but no event of the log extends it",
            pcr,
            bank,
        )
    if got == value:
        return None
    index = last[bank, pcr]
    return Finding(
        "eventlog.replay_mismatch",
        f"PCR {pcr} ({bank}): the log replays to {got.hex()}, the quote holds "
        f"{value.hex() if isinstance(value, bytes) else value!r}; the last event extended "
        f"into it is {log.events[index - 1].describe()}",
        pcr,
        bank,
        index,
    )
