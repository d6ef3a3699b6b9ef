"""Property and fuzz tests of both log parsers (every input is untrusted bytes): arbitrary or
mutated bytes raise only MalformedLog, replay never raises on what parses, and whatever the
builders write parses back to what was built."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attest import efi_events as E
from attest import tpm_constants as C
from attest.errors import MalformedLog
from attest.eventlog import parse_event_log
from attest.eventlog_replay import compare
from attest.ima import BINARY, parse_ima
from attest.ima_replay import ImaState, extend
from tests.attest import eventlog_builder as B
from tests.attest.test_parsers_fuzz import _mutations

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TYPICAL = B.typical_boot(B.LogBuilder(), locality=3).to_bytes()
IMA_ENTRIES = [
    B.boot_aggregate(bytes(32)),
    B.file_entry("/usr/bin/nvidia-smi", b"nvidia-smi"),
    B.file_entry("/init", b"init", "ima"),
    B.file_entry("/usr/bin/sudo", b"sudo", "ima-sig", signature=b"\x03\x02sig"),
    B.BuiltImaEntry("ima-buf", "sha256", bytes(32), b"kexec-cmdline", b"ro"),
]
IMA_ASCII = B.ima_list(IMA_ENTRIES)
IMA_BINARY = B.ima_list(IMA_ENTRIES, BINARY)
QUOTED = {"sha1": {0: bytes(20), 7: bytes(20)}, "sha256": {0: bytes(32), 4: bytes(32)}}
PARSERS = {
    "eventlog": parse_event_log,
    "ima-ascii": parse_ima,
    "ima-binary": lambda data: parse_ima(data, BINARY),
}
VALID = {"eventlog": TYPICAL, "ima-ascii": IMA_ASCII, "ima-binary": IMA_BINARY}


def _only_malformed_log(name: str, data: bytes) -> None:
    try:
        parsed = PARSERS[name](data)
    except MalformedLog as exc:
        assert exc.code.startswith(("eventlog.", "ima.")) and exc.offset >= 0
        return
    if name == "eventlog":
        compare(parsed, QUOTED)  # replay of anything that parses never raises
    else:
        extend(ImaState(), parsed)


@pytest.mark.parametrize("name", sorted(PARSERS))
@FUZZ
@given(data=st.binary(max_size=700))
def test_arbitrary_bytes_raise_only_malformed_log(name: str, data: bytes) -> None:
    _only_malformed_log(name, data)


@pytest.mark.parametrize("name", sorted(PARSERS))
@FUZZ
@given(data=st.data())
def test_mutated_logs_raise_only_malformed_log(name: str, data) -> None:
    _only_malformed_log(name, data.draw(_mutations(VALID[name])))


@FUZZ
@given(prefix=st.binary(max_size=60), line=st.binary(max_size=200))
def test_arbitrary_ascii_lines_raise_only_malformed_log(prefix: bytes, line: bytes) -> None:
    _only_malformed_log("ima-ascii", IMA_ASCII + prefix + b" " + line + b"\n")


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_a_length_field_of_4_gib_is_refused_at_once(name: str) -> None:
    """Every length is checked against its bound and what is left before anything is read."""
    valid = VALID[name]
    start = time.perf_counter()
    for at in range(len(valid) - 4):
        _only_malformed_log(name, valid[:at] + b"\xff\xff\xff\xff" + valid[at + 4 :])
    assert time.perf_counter() - start < 30


EVENT_TYPES = [
    E.EV_POST_CODE, E.EV_SEPARATOR, E.EV_S_CRTM_VERSION, E.EV_IPL, E.EV_EVENT_TAG,
    E.EV_EFI_VARIABLE_DRIVER_CONFIG, E.EV_EFI_VARIABLE_BOOT, E.EV_EFI_VARIABLE_AUTHORITY,
    E.EV_EFI_BOOT_SERVICES_APPLICATION, E.EV_EFI_GPT_EVENT, E.EV_EFI_ACTION,
    E.EV_EFI_PLATFORM_FIRMWARE_BLOB, E.EV_EFI_PLATFORM_FIRMWARE_BLOB2,
    E.EV_EFI_HANDOFF_TABLES, E.EV_EFI_HANDOFF_TABLES2, 0x7777, 0x800000FF,
]  # fmt: skip
banks = st.lists(
    st.sampled_from([C.ALG_SHA1, C.ALG_SHA256, C.ALG_SHA384, C.ALG_SHA512]),
    min_size=1,
    max_size=4,
    unique=True,
)
events = st.lists(
    st.tuples(st.integers(0, 23), st.sampled_from(EVENT_TYPES), st.binary(max_size=80)),
    max_size=20,
)


@FUZZ
@given(banks=banks, events=events, vendor=st.binary(max_size=20), uintn=st.sampled_from([1, 2]))
def test_any_log_the_builder_writes_parses_back_to_what_was_built(
    banks, events, vendor: bytes, uintn: int
) -> None:
    log = B.LogBuilder(tuple(banks), vendor, uintn)
    for pcr, kind, data in events:
        log.add(pcr, kind, data)
    parsed = parse_event_log(log.to_bytes())
    assert parsed.spec_id.banks == tuple(banks) and parsed.spec_id.vendor_info == vendor
    assert [(e.pcr, e.type, e.digests, e.data) for e in parsed.events] == [
        (e.pcr, e.type, e.digests, e.data) for e in log.events
    ]
    assert compare(parsed, compare(parsed, {}).replayed).ok


paths = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\n\x00"),
    max_size=60,
).map(lambda p: "/" + p)
ima_entries = st.lists(
    st.tuples(
        st.sampled_from(["ima", "ima-ng", "ima-sig", "ima-buf"]),
        paths,
        st.binary(max_size=40),
        st.sampled_from(["sha1", "sha256", "sha512"]),
        st.binary(max_size=40),
    ),
    max_size=12,
)


@FUZZ
@given(specs=ima_entries)
def test_any_ima_list_the_builder_writes_parses_back_in_both_formats(specs) -> None:
    built = []
    for template, path, content, alg, extra in specs:
        if template == "ima":
            path = path.encode()[:255].decode(errors="ignore")
        entry = B.file_entry(path, content, template, alg)
        if template in ("ima-sig", "ima-buf"):
            entry = B.BuiltImaEntry(template, entry.digest_alg, entry.digest, entry.name, extra)
        built.append(entry)
    for fmt in ("ascii", BINARY):
        parsed = parse_ima(B.ima_list(built, fmt), fmt)
        assert [(e.template, e.digest_alg, e.digest, e.name, e.extra) for e in parsed] == [
            (b.template, b.digest_alg, b.digest, b.name, b.extra) for b in built
        ]
        assert [e.template_hash for e in parsed] == [b.template_hash() for b in built]
