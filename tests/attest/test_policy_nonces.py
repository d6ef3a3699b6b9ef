from __future__ import annotations

import pytest

from attest.errors import PolicyError
from attest.nonces import NONCE_BYTES, NONCE_TTL_S, NonceRegistry
from attest.policy import PcrPolicy

H = "ab" * 32


def test_policy_round_trips_json() -> None:
    doc = {"pcrs": {"sha256": {"0": H, "7": H, "2": None}}}
    policy = PcrPolicy.from_json(doc)
    assert policy.selection == {"sha256": frozenset({0, 2, 7})}
    assert policy.golden == {"sha256": {0: bytes.fromhex(H), 7: bytes.fromhex(H)}}
    assert PcrPolicy.from_json(policy.to_json()) == policy


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"pcrs": {"md5": {"0": H}}},
        {"pcrs": {"sha256": {"24": H}}},
        {"pcrs": {"sha256": {"x": H}}},
        {"pcrs": {"sha256": {"0": "ab"}}},
        {"pcrs": {"sha256": {"0": "zz" * 32}}},
        {"pcrs": {"sha256": {}}},
        "not json",
    ],
)
def test_policy_rejects_bad_documents(doc) -> None:
    with pytest.raises(PolicyError):
        PcrPolicy.from_json(doc)


class FakeClock:
    """An injected clock (time is an input here, not the thing under test)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_nonce_is_accepted_once() -> None:
    reg = NonceRegistry(clock=FakeClock())
    nonce = reg.issue("node-1")
    assert len(nonce) == NONCE_BYTES
    assert reg.consume(nonce, "node-1").ok
    replay = reg.consume(nonce, "node-1")
    assert (replay.ok, replay.code) == (False, "nonce_replayed")


def test_expired_nonce_is_rejected() -> None:
    clock = FakeClock()
    reg = NonceRegistry(clock=clock)
    nonce = reg.issue("node-1")
    clock.now += NONCE_TTL_S
    assert reg.consume(nonce, "node-1").code == "nonce_expired"


def test_unknown_and_foreign_nonces_are_rejected() -> None:
    reg = NonceRegistry(clock=FakeClock())
    assert reg.consume(b"\x00" * NONCE_BYTES, "node-1").code == "nonce_unknown"
    assert reg.consume(b"short", "node-1").code == "nonce_unknown"
    nonce = reg.issue("node-1")
    assert reg.consume(nonce, "node-2").code == "nonce_wrong_subject"


def test_expired_nonces_are_purged_on_issue() -> None:
    clock = FakeClock()
    reg = NonceRegistry(clock=clock)
    old = reg.issue("node-1")
    clock.now += NONCE_TTL_S + 1
    reg.issue("node-1")
    assert reg.consume(old, "node-1").code == "nonce_unknown"
