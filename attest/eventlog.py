"""A strict, bounded parser of the measured-boot event log in the TCG PC Client Platform
Firmware Profile's crypto-agile format: what Linux serves at
/sys/kernel/security/tpm0/binary_bios_measurements.

The log is untrusted bytes. It starts with one SHA-1-format TCG_PCClientPCREvent carrying the
Spec ID Event03 (the banks the firmware logs and their digest sizes), then TCG_PCR_EVENT2
records: pcrIndex, eventType, one (algId, digest) per bank, eventSize, event. Every length is
checked against what is left and against a bound, every record must carry exactly the Spec
ID's banks, each once, with the Spec ID's digest sizes, and the log must end on a record's
last byte. Anything else raises `MalformedLog` with a reason code, the field and the offset.

Event data is decoded by `attest.efi_events` (never refused there). Replay against quoted
PCRs is `attest.eventlog_replay`. No libtss2: an endorsing peer parses with this alone.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from attest import efi_events as E
from attest import tpm_constants as C
from attest.errors import MalformedLog

MAX_LOG_BYTES = 1024 * 1024  # real logs are 20-200 KiB; a large dbx adds ~20 KiB
MAX_EVENTS = 8192  # real logs carry 50-400
MAX_EVENT_DATA_BYTES = 64 * 1024  # the largest real events are db/dbx, ~10-30 KiB
MAX_ALGORITHMS = 8  # banks in the Spec ID event (TPMs implement at most five)
MAX_DIGEST_BYTES = 64  # SHA-512
SPEC_ID_SIGNATURE = b"Spec ID Event03\x00"
SPEC_VERSION_MAJOR = 2
UINTN_BYTES = {1: 4, 2: 8}  # the Spec ID's uintnSize: 32- or 64-bit firmware
# TCG_PCClientPCREvent: pcrIndex, eventType, SHA-1 digest, eventDataSize
SHA1_EVENT_HEADER = struct.Struct("<II20sI")
# TCG_EfiSpecIdEventStruct up to the algorithm list
SPEC_ID_HEADER = struct.Struct("<16sIBBBBI")
ALGORITHM_ENTRY = struct.Struct("<HH")
EVENT2_HEADER = struct.Struct("<III")  # pcrIndex, eventType, digests count
U8 = struct.Struct("<B")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")


@dataclass(frozen=True)
class SpecId:
    """The Spec ID Event03: the banks every later event carries, in the log's order."""

    platform_class: int
    spec_version_minor: int
    spec_version_major: int
    spec_errata: int
    uintn_size: int
    algorithms: tuple[tuple[int, int], ...]  # (TPM_ALG_ID, digest size)
    vendor_info: bytes

    @property
    def banks(self) -> tuple[int, ...]:
        return tuple(alg for alg, _ in self.algorithms)


@dataclass(frozen=True)
class Event:
    """One TCG_PCR_EVENT2. `index` counts as tpm2_eventlog's EventNum does: the Spec ID
    event is 0, the first record 1. `offset` is where the record starts in the log."""

    index: int
    offset: int
    pcr: int
    type: int
    digests: tuple[tuple[int, bytes], ...]  # (TPM_ALG_ID, digest), in the log's order
    data: bytes
    decoded: E.Decoded

    @property
    def type_name(self) -> str:
        return E.EVENT_TYPE_NAMES.get(self.type, f"{self.type:#010x}")

    def digest(self, alg: int) -> bytes | None:
        return next((d for a, d in self.digests if a == alg), None)

    def describe(self) -> str:
        """ "event 12 (EV_SEPARATOR, PCR 7)": how verdicts name an event."""
        return f"event {self.index} ({self.type_name}, PCR {self.pcr})"


@dataclass(frozen=True)
class EventLog:
    """A parsed log. `startup_locality` is 0 unless a StartupLocality event says 3 or 4."""

    spec_id: SpecId
    events: tuple[Event, ...]
    startup_locality: int = 0
    size: int = 0  # bytes


class _Cursor:
    """Little-endian reads over the log, each checked against what is left."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)
        self.at = 0

    def fail(self, code: str, field: str, detail: str, at: int | None = None) -> MalformedLog:
        return MalformedLog(code, f"eventlog.{field}", self.at if at is None else at, detail)

    def need(self, n: int, field: str) -> None:
        if self.size - self.at < n:
            raise self.fail(
                "eventlog.truncated", field, f"needs {n} bytes, {self.size - self.at} left"
            )

    def unpack(self, fmt: struct.Struct, field: str) -> tuple[Any, ...]:
        self.need(fmt.size, field)
        out = fmt.unpack_from(self.data, self.at)
        self.at += fmt.size
        return out

    def take(self, n: int, field: str) -> bytes:
        self.need(n, field)
        self.at += n
        return self.data[self.at - n : self.at]


def parse_event_log(data: bytes) -> EventLog:
    """Parse a crypto-agile event log; `MalformedLog` (a `MalformedEvidence`) on anything
    else, naming the reason code, field and offset of the first problem."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise MalformedLog("eventlog.not_bytes", "eventlog", 0, f"got {type(data).__name__}")
    data = bytes(data)
    if len(data) > MAX_LOG_BYTES:
        raise MalformedLog(
            "eventlog.too_large",
            "eventlog",
            MAX_LOG_BYTES,
            f"{len(data)} bytes exceeds the bound of {MAX_LOG_BYTES}",
        )
    cur = _Cursor(data)
    spec_id = _read_spec_id(cur)
    sizes = dict(spec_id.algorithms)
    uintn = UINTN_BYTES[spec_id.uintn_size]
    events: list[Event] = []
    locality: int | None = None
    pcr0_extended = False
    while cur.at < cur.size:
        if len(events) == MAX_EVENTS:
            raise cur.fail("eventlog.too_many_events", "events", f"more than {MAX_EVENTS} events")
        event = _read_event2(cur, len(events) + 1, sizes, uintn)
        if isinstance(event.decoded, E.StartupLocality):
            _check_locality(cur, event, locality, pcr0_extended)
            locality = event.decoded.locality
        elif event.pcr == 0 and event.type != E.EV_NO_ACTION:
            pcr0_extended = True
        events.append(event)
    return EventLog(spec_id, tuple(events), locality or 0, len(data))


def _read_spec_id(cur: _Cursor) -> SpecId:
    pcr, kind, digest, size = cur.unpack(SHA1_EVENT_HEADER, "spec_id.header")
    if kind != E.EV_NO_ACTION or pcr != 0 or digest != bytes(20):
        raise cur.fail(
            "eventlog.not_crypto_agile",
            "spec_id.header",
            f"the first event (PCR {pcr}, type {kind:#x}) is not the EV_NO_ACTION Spec ID "
            "event with a zero digest: a SHA-1-only (TPM 1.2) log is not accepted",
            0,
        )
    start = cur.at
    if size > MAX_EVENT_DATA_BYTES:
        raise cur.fail("eventlog.event_too_large", "spec_id.eventDataSize", f"{size} bytes")
    body = _Cursor(cur.take(size, "spec_id.event"))
    sig, platform, minor, major, errata, uintn, count = _spec_field(body, start, SPEC_ID_HEADER)
    if sig != SPEC_ID_SIGNATURE:
        raise cur.fail("eventlog.not_crypto_agile", "spec_id.signature", f"{sig!r}", start)
    if major != SPEC_VERSION_MAJOR or uintn not in UINTN_BYTES:
        raise cur.fail(
            "eventlog.bad_header",
            "spec_id.specVersionMajor",
            f"version {major}.{minor}, uintnSize {uintn}: want version 2, uintnSize 1 or 2",
            start + 20,
        )
    if not 1 <= count <= MAX_ALGORITHMS:
        raise cur.fail(
            "eventlog.bad_algorithms",
            "spec_id.numberOfAlgorithms",
            f"{count} banks: want 1 to {MAX_ALGORITHMS}",
            start + 24,
        )
    algorithms: list[tuple[int, int]] = []
    for i in range(count):
        at = start + body.at
        alg, digest_size = _spec_field(body, start, ALGORITHM_ENTRY)
        known = C.DIGEST_SIZES.get(alg)
        if any(alg == seen for seen, _ in algorithms):
            raise cur.fail(
                "eventlog.bad_algorithms", f"spec_id.algorithms[{i}]", f"{alg:#06x} repeated", at
            )
        if not 1 <= digest_size <= MAX_DIGEST_BYTES or known not in (None, digest_size):
            raise cur.fail(
                "eventlog.bad_algorithms",
                f"spec_id.algorithms[{i}].digestSize",
                f"{digest_size} bytes for algorithm {alg:#06x}",
                at + 2,
            )
        algorithms.append((alg, digest_size))
    (vendor_size,) = _spec_field(body, start, U8)
    vendor = body.data[body.at : body.at + vendor_size]
    if body.at + vendor_size != size:
        raise cur.fail(
            "eventlog.bad_header",
            "spec_id.vendorInfoSize",
            f"vendorInfoSize {vendor_size} leaves {size - body.at - vendor_size} of the "
            f"{size} bytes of the Spec ID event unexplained",
            start + body.at - 1,
        )
    return SpecId(platform, minor, major, errata, uintn, tuple(algorithms), vendor)


def _spec_field(body: _Cursor, start: int, fmt: struct.Struct) -> tuple[Any, ...]:
    if body.size - body.at < fmt.size:
        raise MalformedLog(
            "eventlog.bad_header",
            "eventlog.spec_id.event",
            start + body.at,
            f"eventDataSize {body.size} is too short for the Spec ID structure",
        )
    return body.unpack(fmt, "spec_id")


def _read_event2(cur: _Cursor, index: int, sizes: dict[int, int], uintn: int) -> Event:
    """One TCG_PCR_EVENT2. On every peer's path: plain index arithmetic, and field names
    are built only when a check fails."""
    data, offset, end = cur.data, cur.at, cur.size
    where = "events[%d]"  # formatted with the index on failure only
    if end - offset < EVENT2_HEADER.size:
        cur.need(EVENT2_HEADER.size, f"{where % index}.header")
    pcr, kind, count = EVENT2_HEADER.unpack_from(data, offset)
    if pcr >= C.PCR_COUNT:
        raise cur.fail("eventlog.bad_pcr_index", f"{where % index}.pcrIndex", f"PCR {pcr}", offset)
    if count != len(sizes):
        raise cur.fail(
            "eventlog.digest_count_mismatch",
            f"{where % index}.digests.count",
            f"{count} digests, the Spec ID event declares {len(sizes)} banks",
            offset + 8,
        )
    at = offset + EVENT2_HEADER.size
    digests: list[tuple[int, bytes]] = []
    for i in range(count):
        if end - at < 2:
            cur.at = at
            cur.need(2, f"{where % index}.digests[{i}].algId")
        alg = data[at] | data[at + 1] << 8
        size = sizes.get(alg)
        if size is None or any(alg == seen for seen, _ in digests):
            code, detail = (
                ("eventlog.unknown_algorithm", f"{alg:#06x} is not in the Spec ID")
                if size is None
                else ("eventlog.digest_count_mismatch", f"bank {alg:#06x} repeated")
            )
            raise cur.fail(code, f"{where % index}.digests[{i}].algId", detail, at)
        if end - at - 2 < size:
            cur.at = at + 2
            cur.need(size, f"{where % index}.digests[{i}].digest")
        digests.append((alg, data[at + 2 : at + 2 + size]))
        at += 2 + size
    cur.at = at
    if end - at < 4:
        cur.need(4, f"{where % index}.eventSize")
    (size,) = U32.unpack_from(data, at)
    if size > MAX_EVENT_DATA_BYTES:
        raise cur.fail(
            "eventlog.event_too_large",
            f"{where % index}.eventSize",
            f"{size} bytes exceeds the bound of {MAX_EVENT_DATA_BYTES}",
            at,
        )
    cur.at = at + 4
    if end - cur.at < size:
        cur.need(size, f"{where % index}.event")
    body = data[cur.at : cur.at + size]
    cur.at += size
    if kind == E.EV_NO_ACTION and any(any(d) for _, d in digests):
        raise cur.fail(
            "eventlog.bad_no_action",
            f"{where % index}.digests",
            "an EV_NO_ACTION event is never extended: its digests must be zero",
            offset,
        )
    return Event(index, offset, pcr, kind, tuple(digests), body, E.decode(kind, body, uintn))


def _check_locality(cur: _Cursor, event: Event, seen: int | None, pcr0_extended: bool) -> None:
    assert isinstance(event.decoded, E.StartupLocality)
    problem = None
    if event.decoded.locality not in E.STARTUP_LOCALITIES:
        problem = f"locality {event.decoded.locality}: want one of {E.STARTUP_LOCALITIES}"
    elif event.pcr != 0:
        problem = f"logged for PCR {event.pcr}, not PCR 0"
    elif seen is not None:
        problem = "a second StartupLocality event"
    elif pcr0_extended:
        problem = "after an event was extended into PCR 0"
    if problem:
        raise cur.fail(
            "eventlog.bad_startup_locality", f"events[{event.index}]", problem, event.offset
        )
