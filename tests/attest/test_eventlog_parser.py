"""Bad event logs: each refused with its reason code, field and offset, never an exception of
another kind; what the parser keeps raw it does not refuse."""

from __future__ import annotations

import struct

import pytest

from attest import efi_events as E
from attest import eventlog as L
from attest import tpm_constants as C
from attest.errors import MalformedEvidence, MalformedLog
from attest.eventlog import parse_event_log
from tests.attest import eventlog_builder as B

SPEC_ID = B.LogBuilder().spec_id_event()
SEPARATOR = B.LogBuilder().add(7, E.EV_SEPARATOR, bytes(4))


def code_of(data: object) -> str:
    with pytest.raises(MalformedLog) as err:
        parse_event_log(data)  # type: ignore[arg-type]
    assert err.value.field.startswith("eventlog") and err.value.offset >= 0
    return err.value.code


def header2(pcr: int, kind: int, digests: list[tuple[int, bytes]], data: bytes) -> bytes:
    out = struct.pack("<III", pcr, kind, len(digests))
    out += b"".join(struct.pack("<H", alg) + d for alg, d in digests)
    return out + struct.pack("<I", len(data)) + data


def spec_id(algorithms: list[tuple[int, int]], vendor: bytes = b"", **kw: int) -> bytes:
    sig = kw.get("sig", b"Spec ID Event03\x00")
    count = kw.get("count", len(algorithms))
    body = sig + struct.pack("<IBBBBI", 0, 0, kw.get("major", 2), 0, kw.get("uintn", 2), count)
    body += b"".join(struct.pack("<HH", a, s) for a, s in algorithms)
    body += bytes([kw.get("vendor_size", len(vendor))]) + vendor
    return struct.pack("<II20sI", 0, E.EV_NO_ACTION, bytes(20), len(body)) + body


# a SHA-1-only (TPM 1.2 format) log: the first event is a measurement
TPM12_LOG = struct.pack("<II20sI", 0, E.EV_S_CRTM_VERSION, b"x" * 20, 2) + b"10"
TWO_BANKS = [(C.ALG_SHA1, 20), (C.ALG_SHA256, 32)]
GOOD_DIGESTS = [(C.ALG_SHA1, bytes(20)), (C.ALG_SHA256, bytes(32))]


def test_a_log_of_only_the_spec_id_event_parses() -> None:
    log = parse_event_log(SPEC_ID)
    assert log.events == () and log.spec_id.banks == (C.ALG_SHA1, C.ALG_SHA256)
    assert log.spec_id.algorithms == ((C.ALG_SHA1, 20), (C.ALG_SHA256, 32))


@pytest.mark.parametrize(
    "data,code",
    [
        (None, "eventlog.not_bytes"),
        ("a log", "eventlog.not_bytes"),
        (b"", "eventlog.truncated"),
        (SPEC_ID[:-1], "eventlog.truncated"),
        (SPEC_ID + SEPARATOR.encode()[:-1], "eventlog.truncated"),
        (SPEC_ID + b"\x00" * 3, "eventlog.truncated"),
        (bytes(L.MAX_LOG_BYTES + 1), "eventlog.too_large"),
        (TPM12_LOG, "eventlog.not_crypto_agile"),
        (spec_id(TWO_BANKS, sig=b"Spec ID Event02\x00"), "eventlog.not_crypto_agile"),
        (spec_id(TWO_BANKS, major=1), "eventlog.bad_header"),
        (spec_id(TWO_BANKS, uintn=3), "eventlog.bad_header"),
        (spec_id(TWO_BANKS, vendor=b"abc", vendor_size=2), "eventlog.bad_header"),
        (spec_id(TWO_BANKS, vendor=b"abc", vendor_size=9), "eventlog.bad_header"),
        (spec_id(TWO_BANKS, count=3), "eventlog.bad_header"),  # the list is shorter than said
        (spec_id([]), "eventlog.bad_algorithms"),
        (spec_id([(C.ALG_SHA1, 20)] * 2), "eventlog.bad_algorithms"),
        (spec_id([(C.ALG_SHA256, 20)]), "eventlog.bad_algorithms"),
        (spec_id([(0x0012, 0)]), "eventlog.bad_algorithms"),
        (spec_id([(0x0012 + i, 32) for i in range(9)]), "eventlog.bad_algorithms"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.startswith("eventlog") else "",
)
def test_bad_headers_are_refused_with_their_code(data, code: str) -> None:
    assert code_of(data) == code


SHA1_0, SHA256_0 = GOOD_DIGESTS
LOCALITY_3 = header2(0, E.EV_NO_ACTION, GOOD_DIGESTS, E.STARTUP_LOCALITY_SIGNATURE + b"\x03")
PCR0_SEPARATOR = header2(0, E.EV_SEPARATOR, GOOD_DIGESTS, bytes(4))
HUGE_EVENT = struct.pack("<III", 7, 4, 2) + b"\x04\x00" + bytes(20) + b"\x0b\x00" + bytes(32)
HUGE_EVENT += struct.pack("<I", 0x7FFFFFFF)  # and no data: refused before any allocation
BAD_EVENTS = {
    "eventlog.bad_pcr_index": header2(24, E.EV_SEPARATOR, GOOD_DIGESTS, bytes(4)),
    "eventlog.digest_count_mismatch": header2(7, 4, [SHA1_0], bytes(4)),
    "more digests than banks": header2(7, 4, [*GOOD_DIGESTS, SHA1_0], bytes(4)),
    "a bank twice": header2(7, 4, [SHA1_0, SHA1_0], bytes(4)),
    "eventlog.unknown_algorithm": header2(7, 4, [SHA1_0, (C.ALG_SHA384, bytes(48))], bytes(4)),
    "eventlog.event_too_large": HUGE_EVENT,
    "eventlog.bad_no_action": header2(0, E.EV_NO_ACTION, [(4, b"\x01" * 20), SHA256_0], b"x"),
    "locality 2": header2(0, 3, GOOD_DIGESTS, E.STARTUP_LOCALITY_SIGNATURE + b"\x02"),
    "locality for PCR 1": header2(1, 3, GOOD_DIGESTS, E.STARTUP_LOCALITY_SIGNATURE + b"\x03"),
    "locality after PCR 0": PCR0_SEPARATOR + LOCALITY_3,
    "locality twice": LOCALITY_3 + LOCALITY_3,
}
BAD_EVENT_CODES = {
    "more digests than banks": "eventlog.digest_count_mismatch",
    "a bank twice": "eventlog.digest_count_mismatch",
    "locality 2": "eventlog.bad_startup_locality",
    "locality for PCR 1": "eventlog.bad_startup_locality",
    "locality after PCR 0": "eventlog.bad_startup_locality",
    "locality twice": "eventlog.bad_startup_locality",
}


@pytest.mark.parametrize("case", sorted(BAD_EVENTS))
def test_bad_events_are_refused_with_their_code(case: str) -> None:
    assert code_of(SPEC_ID + BAD_EVENTS[case]) == BAD_EVENT_CODES.get(case, case)


def test_errors_are_malformed_evidence_naming_field_and_offset() -> None:
    bad = SPEC_ID + SEPARATOR.encode() + header2(7, 4, GOOD_DIGESTS[:1], bytes(4))
    with pytest.raises(MalformedEvidence) as err:
        parse_event_log(bad)
    assert isinstance(err.value, MalformedLog)
    assert err.value.field == "eventlog.events[2].digests.count"
    assert err.value.offset == len(SPEC_ID) + len(SEPARATOR.encode()) + 8


def test_more_events_than_the_bound_are_refused() -> None:
    log = B.LogBuilder((C.ALG_SHA1,))
    for _ in range(L.MAX_EVENTS + 1):
        log.add(16, 0x9999, b"")
    assert code_of(log.to_bytes()) == "eventlog.too_many_events"
    assert len(parse_event_log(log.to_bytes(log.events[:-1])).events) == L.MAX_EVENTS


def test_unknown_types_and_undecodable_data_are_kept_raw_not_refused() -> None:
    log = B.LogBuilder()
    log.add(3, 0x12345678, b"vendor")
    log.add(7, E.EV_EFI_VARIABLE_DRIVER_CONFIG, b"too short")
    log.add(4, E.EV_EFI_BOOT_SERVICES_APPLICATION, B.image_load(1, 2, b"path")[:-1])
    log.add(7, E.EV_SEPARATOR, b"\xff\xff\xff\xff\x00")
    unknown, variable, image, separator = parse_event_log(log.to_bytes()).events
    assert unknown.decoded is None and unknown.data == b"vendor"
    assert unknown.type_name == "0x12345678"
    assert isinstance(variable.decoded, E.Undecodable)
    assert isinstance(image.decoded, E.Undecodable)
    assert isinstance(separator.decoded, E.Undecodable)


def test_startup_locality_3_and_4_are_accepted() -> None:
    for locality in (0, 3, 4):
        log = B.LogBuilder()
        log.add(0, E.EV_NO_ACTION, E.STARTUP_LOCALITY_SIGNATURE + bytes([locality]))
        log.add(0, E.EV_SEPARATOR, bytes(4))
        assert parse_event_log(log.to_bytes()).startup_locality == locality


def test_a_handoff_table_pointer_is_the_firmwares_pointer_size() -> None:
    for uintn, pointer in ((1, 4), (2, 8)):
        log = B.LogBuilder(uintn_size=uintn)
        table = B.guid(B.ACPI_20_TABLE) + (0x7FB7E014).to_bytes(pointer, "little")
        log.add(1, E.EV_EFI_HANDOFF_TABLES, struct.pack("<Q", 1) + table)
        [event] = parse_event_log(log.to_bytes()).events
        assert event.decoded == E.HandoffTables(((B.ACPI_20_TABLE, 0x7FB7E014),))
