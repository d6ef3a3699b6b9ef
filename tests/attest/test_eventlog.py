"""A built boot log, extended into a real swtpm and quoted through the agent and the verifier,
replays to the quoted PCRs; a tampered log is refused with the first divergence named."""

from __future__ import annotations

import dataclasses
import os

import pytest

from attest import efi_events as E
from attest import tpm_constants as C
from attest.agent import AK_ECC, Agent, AkKey
from attest.eventlog import parse_event_log
from attest.eventlog_replay import compare
from attest.verifier import PcrPolicy, verify_quote
from tests.attest import eventlog_builder as B
from tests.attest.conftest import reboot

BOOT_PCRS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 14)
QUOTED_PCRS = (*BOOT_PCRS, 15)  # 15: quoted, never extended by the firmware
BANKS = ("sha1", "sha256", "sha384")
SELECTION = "+".join(f"{bank}:{','.join(map(str, QUOTED_PCRS))}" for bank in BANKS)
POLICY = PcrPolicy.from_json({"pcrs": {b: {str(p): None for p in QUOTED_PCRS} for b in BANKS}})


@pytest.fixture(scope="module")
def boot_ak(boot_node) -> AkKey:
    with Agent(boot_node.tcti) as agent:
        return agent.create_ak(AK_ECC)


def boot_and_quote(node, ak: AkKey, events, locality: int = 0) -> dict:
    """Boot the TPM, extend the logged events as firmware would, and return the PCR values
    of a genuine quote as the verifier authenticated them."""
    reboot(node, locality)
    nonce = os.urandom(32)
    with Agent(node.tcti) as agent:
        B.extend_into(agent, events)
        ev = agent.quote(ak, nonce, SELECTION)
    verdict = verify_quote(ak.public, ev.quote, ev.signature, ev.pcr_values, nonce, policy=POLICY)
    assert verdict.valid, verdict.reasons
    assert verdict.pcr_values is not None
    return verdict.pcr_values


@pytest.fixture(scope="module")
def typical(boot_node, boot_ak):
    """A three-bank OVMF + shim + grub log and the quote of the TPM it was extended into."""
    log = B.typical_boot(B.LogBuilder(B.SHA1_SHA256_SHA384))
    return log, boot_and_quote(boot_node, boot_ak, log.events)


@pytest.mark.swtpm
def test_replay_of_a_built_log_equals_the_quoted_pcrs(typical) -> None:
    log, quoted = typical
    result = compare(parse_event_log(log.to_bytes()), quoted, BOOT_PCRS)
    assert result.ok, result.findings
    assert {bank: {p: result.replayed[bank][p] for p in BOOT_PCRS} for bank in BANKS} == {
        bank: {p: quoted[bank][p] for p in BOOT_PCRS} for bank in BANKS
    }


@pytest.mark.swtpm
def test_a_quoted_pcr_the_log_never_extends_is_a_finding(typical) -> None:
    log, quoted = typical
    result = compare(parse_event_log(log.to_bytes()), quoted)
    assert [(f.code, f.pcr, f.bank) for f in result.findings] == [
        ("eventlog.pcr_not_in_log", 15, bank) for bank in BANKS
    ]


@pytest.mark.swtpm
def test_startup_locality_3_sets_pcr0_and_replays(boot_node, boot_ak) -> None:
    log = B.typical_boot(B.LogBuilder(B.SHA1_SHA256_SHA384), locality=3)
    quoted = boot_and_quote(boot_node, boot_ak, log.events, locality=3)
    parsed = parse_event_log(log.to_bytes())
    assert parsed.startup_locality == 3
    assert compare(parsed, quoted, BOOT_PCRS).ok
    # the same log without its StartupLocality event no longer explains PCR 0
    stripped = parse_event_log(log.to_bytes(log.events[1:]))
    first = compare(stripped, quoted, BOOT_PCRS).first
    assert first is not None
    assert (first.code, first.pcr, first.bank) == ("eventlog.replay_mismatch", 0, "sha1")
    assert first.event == max(e.index for e in stripped.events if e.pcr == 0)


def _index(log: B.LogBuilder, pcr: int, kind: int, nth: int = 0) -> int:
    """Position in log.events of the nth event of this PCR and type."""
    hits = [i for i, e in enumerate(log.events) if e.pcr == pcr and e.type == kind]
    return hits[nth]


def _flip(raw: bytes, offset: int) -> bytes:
    return raw[:offset] + bytes([raw[offset] ^ 0x01]) + raw[offset + 1 :]


def _tampered(log: B.LogBuilder, how: str) -> tuple[bytes, int, str]:
    """The tampered log's bytes, and the PCR and code its first finding must name."""
    events = list(log.events)
    raw = log.to_bytes()
    parsed = parse_event_log(raw).events
    grub = _index(log, 4, E.EV_EFI_BOOT_SERVICES_APPLICATION, 1)
    if how == "digest byte":  # the boot loader's SHA-1 digest (after pcr, type, count, algId)
        return _flip(raw, parsed[grub].offset + 12 + 2 + 5), 4, "eventlog.replay_mismatch"
    if how == "separator data byte":
        separator = parsed[_index(log, 7, E.EV_SEPARATOR)]
        end = separator.offset + len(events[separator.index - 1].encode())
        return _flip(raw, end - 1), 7, "eventlog.event_digest_mismatch"
    if how == "reordered":  # KEK before PK
        pk = _index(log, 7, E.EV_EFI_VARIABLE_DRIVER_CONFIG, 1)
        events[pk], events[pk + 1] = events[pk + 1], events[pk]
        return log.to_bytes(events), 7, "eventlog.replay_mismatch"
    if how == "dropped":  # the boot loader's measurement removed
        del events[grub]
        return log.to_bytes(events), 4, "eventlog.replay_mismatch"
    assert how == "extra"  # a command line nobody measured
    extra = B.LogBuilder(log.banks).add(8, E.EV_IPL, b"grub_cmd: linux /evil\x00", b"/evil")
    return log.to_bytes([*events, extra]), 8, "eventlog.replay_mismatch"


@pytest.mark.swtpm
@pytest.mark.parametrize(
    "how", ["digest byte", "separator data byte", "reordered", "dropped", "extra"]
)
def test_tampered_log_is_refused_with_the_first_divergence_named(typical, how: str) -> None:
    log, quoted = typical
    raw, pcr, code = _tampered(log, how)
    tampered = parse_event_log(raw)
    result = compare(tampered, quoted, BOOT_PCRS)
    assert not result.ok
    first = result.first
    assert first is not None
    assert (first.code, first.pcr, first.bank) == (code, pcr, "sha1")
    if code == "eventlog.replay_mismatch":
        # the PCR's last event in the tampered log is named, and nothing else diverges
        assert first.event == max(e.index for e in tampered.events if e.pcr == pcr)
        assert [f.pcr for f in result.findings] == [pcr] * len(result.findings)
        assert f"PCR {pcr}" in first.detail
    else:
        separator = next(e for e in tampered.events if e.pcr == 7 and e.type == E.EV_SEPARATOR)
        assert first.event == separator.index


def test_a_quoted_bank_the_log_does_not_carry_is_a_finding() -> None:
    log = B.typical_boot(B.LogBuilder((C.ALG_SHA256,)))
    parsed = parse_event_log(log.to_bytes())
    replayed = compare(parsed, {}).replayed
    quoted = {"sha256": replayed["sha256"], "sha384": {0: bytes(48)}}
    assert [f.code for f in compare(parsed, quoted).findings] == ["eventlog.bank_not_in_log"]


def test_findings_become_verdict_reasons() -> None:
    log = B.typical_boot(B.LogBuilder())
    parsed = parse_event_log(log.to_bytes())
    quoted = {"sha256": {7: bytes(32)}}
    [reason] = compare(parsed, quoted).reasons()
    assert reason.code == "eventlog.replay_mismatch" and reason.severity == "error"
    assert "EV_EFI_VARIABLE_AUTHORITY, PCR 7" in reason.detail


def test_secure_boot_state_and_dbx_are_decoded() -> None:
    on = parse_event_log(B.typical_boot(B.LogBuilder()).to_bytes())
    off = parse_event_log(B.typical_boot(B.LogBuilder(), secure_boot=False).to_bytes())
    variables = {
        e.decoded.name: e.decoded
        for e in on.events
        if e.type == E.EV_EFI_VARIABLE_DRIVER_CONFIG and isinstance(e.decoded, E.UefiVariable)
    }
    assert variables["SecureBoot"].data == b"\x01"
    [dbx] = variables["dbx"].signature_lists or ()
    assert dbx.signature_type == B.EFI_CERT_SHA256 and len(dbx.signatures) == 1
    assert any(
        isinstance(e.decoded, E.UefiVariable)
        and e.decoded.name == "SecureBoot"
        and e.decoded.data == b"\x00"
        for e in off.events
    )


@pytest.mark.swtpm
def test_event_data_outside_the_digest_bound_types_is_not_authenticated(typical) -> None:
    """A device path is not measured: changing it changes no digest and no PCR. Policies
    must judge such events by their digests only (docs/attestation.md)."""
    log, quoted = typical
    grub = _index(log, 4, E.EV_EFI_BOOT_SERVICES_APPLICATION, 1)
    events = list(log.events)
    moved = B.image_load(0x7D8E0018, 0x1E8000, b"\x04\x04\x08\x00evil\x7f\xff\x04\x00")
    events[grub] = dataclasses.replace(events[grub], data=moved)
    assert compare(parse_event_log(log.to_bytes(events)), quoted, BOOT_PCRS).ok
