"""IMA: entries over real file digests, template hashes recomputed as the kernel computes
them, PCR 10 replayed equal to a real swtpm's after the same extends, incremental replay equal
to the full one, and bad lists refused with a reason code."""

from __future__ import annotations

import hashlib
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attest import tpm_constants as C
from attest.agent import AK_ECC, Agent, AkKey
from attest.errors import MalformedLog
from attest.ima import BINARY, IMA_PCR, parse_ima
from attest.ima_replay import ImaState, extend, match_quote, replay_ima
from attest.verifier import PcrPolicy, verify_quote
from tests.attest import eventlog_builder as B
from tests.attest.conftest import reboot

THREE_BANKS = (C.ALG_SHA1, C.ALG_SHA256, C.ALG_SHA384)
SELECTION = "sha1:10+sha256:10+sha384:10"
POLICY = PcrPolicy.from_json({"pcrs": {b: {"10": None} for b in ("sha1", "sha256", "sha384")}})
FILES = {
    "/usr/bin/wattlease-agent": b"#!/usr/bin/python3\nimport attest\n",
    "/usr/lib/modules/6.1.0-13-amd64/updates/dkms/nvidia.ko": os.urandom(4096),
    "/usr/bin/nvidia-smi": os.urandom(2048),
    "/etc/ld.so.cache": b"ld.so-1.7.0",
    "/tmp/a file with spaces": b"spaces",
}


def measured_list() -> list[B.BuiltImaEntry]:
    """boot_aggregate, then every template, a signed file, a violation and a buffer."""
    files = sorted(FILES.items())
    entries = [B.boot_aggregate(hashlib.sha256(b"PCRs 0-9").digest())]
    entries += [B.file_entry(path, content) for path, content in files]
    entries.append(B.file_entry("/usr/sbin/init", b"systemd", template="ima"))
    entries.append(
        B.file_entry("/usr/bin/sudo", b"sudo", "ima-sig", signature=b"\x03\x02" + os.urandom(72))
    )
    entries.append(B.file_entry("/usr/bin/unsigned", b"x", "ima-sig"))
    entries.append(B.BuiltImaEntry("ima-ng", "sha256", bytes(32), b"/var/log/open", violation=True))
    entries.append(
        B.BuiltImaEntry(
            "ima-buf", "sha256", hashlib.sha256(b"ro").digest(), b"kexec-cmdline", b"ro"
        )
    )
    entries.append(B.file_entry("/usr/bin/sha1", b"old", alg="sha1"))
    return entries


@pytest.fixture(scope="module")
def ima_ak(boot_node) -> AkKey:
    with Agent(boot_node.tcti) as agent:
        return agent.create_ak(AK_ECC)


def boot_with_ima(node, ak: AkKey, digests: list[dict[int, bytes]]) -> dict:
    """Boot, extend PCR 10 as the kernel would, and return the authenticated quote values."""
    reboot(node)
    nonce = os.urandom(32)
    with Agent(node.tcti) as agent:
        for digest in digests:
            agent.extend_digests(IMA_PCR, digest)
        ev = agent.quote(ak, nonce, SELECTION)
    verdict = verify_quote(ak.public, ev.quote, ev.signature, ev.pcr_values, nonce, policy=POLICY)
    assert verdict.valid, verdict.reasons
    return verdict.pcr_values or {}


@pytest.mark.parametrize("fmt", ["ascii", BINARY])
def test_template_hashes_are_recomputed_as_the_kernel_computes_them(fmt: str) -> None:
    built = measured_list()
    parsed = parse_ima(B.ima_list(built, fmt), fmt)
    assert [e.index for e in parsed] == list(range(len(built)))
    for entry, want in zip(parsed, built, strict=True):
        assert (entry.template, entry.digest_alg, entry.digest) == (
            want.template,
            want.digest_alg,
            want.digest,
        )
        assert (entry.name, entry.extra, entry.violation) == (want.name, want.extra, want.violation)
        assert entry.hashed == want.template_data()
        assert entry.template_hash == want.template_hash()
    assert parsed[2].path == sorted(FILES)[1]
    assert parsed[-1].digest == hashlib.sha1(b"old").digest()


def test_both_formats_give_the_same_entries() -> None:
    built = measured_list()
    assert parse_ima(B.ima_list(built)) == parse_ima(B.ima_list(built, BINARY), BINARY)


@pytest.mark.swtpm
def test_pcr10_replay_equals_a_real_swtpm(boot_node, ima_ak) -> None:
    built = measured_list()
    quoted = boot_with_ima(
        boot_node, ima_ak, [{alg: B.ima_bank_digest(e, alg) for alg in THREE_BANKS} for e in built]
    )
    state, entries = replay_ima(B.ima_list(built), ImaState(banks=THREE_BANKS))
    for alg in THREE_BANKS:
        assert state.value(alg) == quoted[C.HASH_NAMES[alg]][IMA_PCR]
    match = match_quote(ImaState(banks=THREE_BANKS), entries, quoted)
    assert match.ok and match.covered == len(built) and match.state == state


@pytest.mark.swtpm
def test_pre_5_8_kernels_extend_the_sha1_digest_padded(boot_node, ima_ak) -> None:
    """Linux < 5.8 extends every bank with the SHA-1 template digest, zero-padded."""
    built = measured_list()
    padded = [
        {
            alg: (b"\xff" * 20 if e.violation else e.template_hash()).ljust(
                C.DIGEST_SIZES[alg], b"\0"
            )
            for alg in THREE_BANKS
        }
        for e in built
    ]
    quoted = boot_with_ima(boot_node, ima_ak, padded)
    entries = parse_ima(B.ima_list(built))
    start = ImaState(banks=THREE_BANKS)
    assert match_quote(start, entries, quoted, legacy_sha1_padding=True).covered == len(built)
    modern = match_quote(start, entries, quoted)
    assert not modern.ok and modern.finding and modern.finding.code == "ima.replay_mismatch"
    assert modern.finding.bank == "sha256"  # SHA-1 is the same either way


@pytest.mark.swtpm
def test_a_list_read_after_the_quote_is_matched_on_the_prefix_the_quote_covers(
    boot_node, ima_ak
) -> None:
    built = measured_list()
    covered = 4
    quoted = boot_with_ima(
        boot_node,
        ima_ak,
        [{alg: B.ima_bank_digest(e, alg) for alg in THREE_BANKS} for e in built[:covered]],
    )
    start = ImaState(banks=THREE_BANKS)
    match = match_quote(start, parse_ima(B.ima_list(built)), quoted)
    assert match.ok and match.covered == covered and match.state.count == covered
    # the next quote's list starts where this one stopped
    rest = parse_ima(B.ima_list(built[covered:]), start=covered)
    assert extend(match.state, rest) == replay_ima(B.ima_list(built), start)[0]


@pytest.mark.swtpm
def test_an_entry_the_tpm_never_saw_is_a_replay_mismatch(boot_node, ima_ak) -> None:
    built = measured_list()
    quoted = boot_with_ima(
        boot_node, ima_ak, [{alg: B.ima_bank_digest(e, alg) for alg in THREE_BANKS} for e in built]
    )
    forged = [*built[:3], B.file_entry("/usr/bin/nvidia-smi", b"a trojan"), *built[4:]]
    match = match_quote(ImaState(banks=THREE_BANKS), parse_ima(B.ima_list(forged)), quoted)
    assert not match.ok and match.finding is not None
    assert (match.finding.code, match.finding.pcr, match.finding.bank) == (
        "ima.replay_mismatch",
        10,
        "sha1",
    )
    assert match.covered == 0 and match.state.count == 0


def test_a_quote_without_pcr10_or_with_an_untracked_bank_is_a_finding() -> None:
    entries = parse_ima(B.ima_list(measured_list()))
    assert (
        match_quote(ImaState(), entries, {"sha256": {7: bytes(32)}}).finding.code
        == "ima.bank_not_tracked"
    )
    assert (
        match_quote(ImaState(), entries, {"sha384": {10: bytes(48)}}).finding.code
        == "ima.bank_not_tracked"
    )


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(0, 12), max_size=5), fmt=st.sampled_from(["ascii", BINARY]))
def test_incremental_replay_equals_the_full_replay(cuts: list[int], fmt: str) -> None:
    built = measured_list()[:12]
    full, _ = replay_ima(B.ima_list(built, fmt), fmt=fmt)
    state = ImaState()
    for a, b in zip([0, *sorted(cuts)], [*sorted(cuts), len(built)], strict=True):
        state, _ = replay_ima(B.ima_list(built[a:b], fmt), state, fmt)
    assert state == full and state.count == len(built)
    assert ImaState.from_dict(state.to_dict()) == state


def test_entries_out_of_order_are_refused() -> None:
    entries = parse_ima(B.ima_list(measured_list()), start=5)
    with pytest.raises(MalformedLog) as err:
        extend(ImaState(count=3), entries)
    assert err.value.code == "ima.not_contiguous"


GOOD = B.file_entry("/usr/bin/x", b"x").ascii()
BAD_LINES = {
    "ima.truncated": GOOD[:-1],
    "ima.bad_line": b"10 abc ima-ng\n",
    "ima.unknown_template": GOOD.replace(b"ima-ng", b"ima-xx"),
    "ima.template_hash_mismatch": GOOD.replace(GOOD[3:5], b"00" if GOOD[3:5] != b"00" else b"11"),
    "ima.bad_digest": GOOD.replace(b"sha256:", b"sha1:"),
    "ima.bad_pcr_index": b"99" + GOOD[2:],
    "uppercase hex": GOOD.replace(GOOD[3:43], GOOD[3:43].upper())
    if GOOD[3:43] != GOOD[3:43].upper()
    else b"x",
    "no digest algorithm": GOOD.replace(b"sha256:", b"sha256"),
}
CODES = {"uppercase hex": "ima.bad_line", "no digest algorithm": "ima.bad_line"}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_ima_lines_that_do_not_parse_are_refused_with_a_code(case: str) -> None:
    with pytest.raises(MalformedLog) as err:
        parse_ima(BAD_LINES[case])
    assert err.value.code == CODES.get(case, case)
    assert err.value.field.startswith("ima.")


def test_binary_lengths_that_lie_are_refused_before_allocating() -> None:
    good = B.file_entry("/usr/bin/x", b"x").binary()
    lying = good[:24] + (0xFFFFFFFF).to_bytes(4, "little") + good[28:]  # template name length
    for data in (lying, good[:-1], good + b"\x00"):
        with pytest.raises(MalformedLog) as err:
            parse_ima(data, BINARY)
        assert err.value.code in ("ima.bad_field", "ima.truncated")
