"""The TPM clock policy after a power loss (attest.clock; docs/attestation.md), with a real
swtpm killed without an orderly shutdown: a power loss is accepted and recorded, a rollback
is refused with its code."""

from __future__ import annotations

import dataclasses
import os

import pytest

from attest import clock
from attest.agent import AK_ECC, Agent, AkKey
from attest.swtpm import LocalCA, Swtpm, start_node_tpm
from attest.verdict import SEVERITY_INFO, ClockInfo
from attest.verifier import verify_quote


@pytest.fixture
def tpm(tmp_path) -> Swtpm:
    swtpm = start_node_tpm(tmp_path / "node", LocalCA(tmp_path / "ca"))
    yield swtpm
    swtpm.stop()


def _quote(tpm: Swtpm, ak: AkKey, previous: ClockInfo | None):
    nonce = os.urandom(32)
    with Agent(tpm.tcti) as agent:
        ev = agent.quote(ak, nonce)
    return verify_quote(ak.public, ev.quote, ev.signature, ev.pcr_values, nonce, None, previous)


def _ak(tpm: Swtpm) -> AkKey:
    with Agent(tpm.tcti) as agent:
        return agent.create_ak(AK_ECC)


def _codes(verdict, severity=SEVERITY_INFO) -> list[str]:
    return [r.code for r in verdict.reasons if r.severity == severity]


@pytest.mark.swtpm
def test_a_power_loss_is_accepted_and_recorded_as_such(tpm) -> None:
    ak = _ak(tpm)
    before = _quote(tpm, ak, None)
    tpm.power_loss()
    tpm.start()
    after = _quote(tpm, ak, before.clock)
    assert after.valid, after.reasons
    assert after.clock.reset_count > before.clock.reset_count and not after.clock.safe
    assert clock.POWER_LOSS in _codes(after)
    assert clock.is_power_loss([r.to_dict() for r in after.reasons])
    # the next quote in the same boot compares with that one: still not safe, no new event
    again = _quote(tpm, ak, after.clock)
    assert again.valid and clock.POWER_LOSS not in _codes(again)
    assert clock.CLOCK_NOT_SAFE in _codes(again)


@pytest.mark.swtpm
def test_an_enrolment_quote_after_a_power_loss_is_accepted(tpm) -> None:
    """No recorded attestation to compare with: the clock is not safe, which is stated."""
    ak = _ak(tpm)
    tpm.power_loss()
    tpm.start()
    verdict = _quote(tpm, ak, None)
    assert verdict.valid, verdict.reasons
    assert clock.CLOCK_NOT_SAFE in _codes(verdict)


@pytest.mark.swtpm
def test_a_rolled_back_tpm_state_is_refused(tpm, tmp_path) -> None:
    """A copy of the TPM's state taken earlier and restored: the counts go back."""
    ak = _ak(tpm)
    tpm.stop()
    saved = {p.name: p.read_bytes() for p in tpm.state_dir.glob("tpm2-00.*")}
    tpm.start()
    for _ in range(2):  # two power losses after the copy was taken
        tpm.power_loss()
        tpm.start()
    recorded = _quote(tpm, ak, None).clock
    tpm.stop()
    for name, data in saved.items():
        (tpm.state_dir / name).write_bytes(data)
    tpm.start()
    verdict = _quote(tpm, ak, recorded)
    assert not verdict.valid
    assert verdict.codes()[0] == "reset_count_decreased", verdict.reasons


@pytest.mark.swtpm
@pytest.mark.parametrize(
    ("shift", "code"),
    [
        ({"clock": 10**12}, "clock_went_backwards"),  # same boot, clock lower
        ({"restart_count": 10**6}, "restart_count_decreased"),
        ({"reset_count": 10**6}, "reset_count_decreased"),
    ],
)
def test_a_clock_behind_the_recorded_one_is_refused_after_a_power_loss(tpm, shift, code) -> None:
    """Even with the clock not safe, the same boot never runs backwards, and counts never
    go down."""
    ak = _ak(tpm)
    tpm.power_loss()
    tpm.start()
    first = _quote(tpm, ak, None).clock
    assert not first.safe
    verdict = _quote(tpm, ak, dataclasses.replace(first, **shift))
    assert not verdict.valid and verdict.codes()[0] == code, verdict.reasons


@pytest.mark.swtpm
def test_a_boot_that_lost_clock_is_a_power_loss_even_once_safe_again(tpm) -> None:
    """The TPM sets `safe` again at its next clock save, which may come before its first
    quote after the restart: the lower clock after a boot still shows the power loss."""
    ak = _ak(tpm)
    tpm.stop()
    tpm.start()
    now = _quote(tpm, ak, None).clock
    assert now.safe
    recorded = ClockInfo(now.clock + 10**9, max(now.reset_count - 1, 0), 0, True)
    verdict = _quote(tpm, ak, recorded)
    assert verdict.valid and clock.POWER_LOSS in _codes(verdict), verdict.reasons


def test_the_policy_without_a_tpm() -> None:
    """The table of docs/attestation.md, case by case."""
    prev = ClockInfo(5_000, 3, 0, True)
    assert clock.judge(ClockInfo(6_000, 3, 0, True), prev) == []
    assert [r.code for r in clock.judge(ClockInfo(1_000, 4, 0, False), prev)] == [clock.POWER_LOSS]
    assert [r.code for r in clock.judge(ClockInfo(6_000, 4, 0, True), prev)] == [clock.REBOOTED]
    assert [r.code for r in clock.judge(ClockInfo(1_000, 4, 0, True), prev)] == [clock.POWER_LOSS]
    assert [r.code for r in clock.judge(ClockInfo(1_000, 3, 1, True), prev)] == [clock.POWER_LOSS]
    assert [r.code for r in clock.judge(ClockInfo(9_000, 2, 0, False), prev)] == [
        "reset_count_decreased"
    ]
    assert [r.code for r in clock.judge(ClockInfo(4_000, 3, 0, False), prev)] == [
        "clock_went_backwards"
    ]
    assert all(r.severity == SEVERITY_INFO for r in clock.judge(ClockInfo(1, 0, 0, False), None))
