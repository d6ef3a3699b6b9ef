"""The embedded engine's Fabric semantics: blocks, endorsement policy, MVCC, duplicates,
events, persistence."""

from __future__ import annotations

import base64
import json
import os
import threading

import pytest

from chaincode_client.embedded import EmbeddedClient
from ledger.audit import verify_ledger
from ledger.engine import EmbeddedLedger
from ledger.engine.endorser import make_proposal
from ledger.engine.tx import RwSet, check_mvcc
from ledger.engine.validate import DictState
from tests.ledger.helpers import js


def node_request(node_id: str) -> str:
    return js(
        {
            "node_id": node_id,
            "org": "Org1MSP",
            "ak_public": base64.b64encode(b"ak-" + node_id.encode()).decode(),
            "gpus": [{"uuid": f"GPU-{node_id}", "generation": "H100"}],
            "pcr_policy": {"pcrs": {"sha256": {"0": "00" * 32}}, "max_age_s": 60},
        }
    )


@pytest.fixture
def ledger(tmp_path):
    ledger = EmbeddedLedger.open(tmp_path / "l.sqlite", block_size=5, block_timeout_s=0.05)
    yield ledger
    ledger.close()


def endorsed(ledger, identity, fn, arg) -> bytes:
    proposal = make_proposal(identity, ledger.channel, fn, [arg], 10**18, os.urandom(24))
    return ledger.endorse(*proposal)[1]


def test_blocks_are_cut_at_block_size(ledger):
    client = EmbeddedClient(ledger, ledger.enroll("Org1MSP", "a"))
    receipts = []
    threads = [
        threading.Thread(
            target=lambda i=i: receipts.append(client.submit("RegisterNode", node_request(f"n{i}")))
        )
        for i in range(12)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    per_block: dict[int, int] = {}
    for r in receipts:
        per_block[r.block_number] = per_block.get(r.block_number, 0) + 1
    assert sum(per_block.values()) == 12 and max(per_block.values()) <= 5


def test_missing_endorsement_fails_policy_and_leaves_state(ledger):
    identity = ledger.enroll("Org1MSP", "a")
    outer = json.loads(endorsed(ledger, identity, "RegisterNode", node_request("n1")))
    outer["endorsements"] = outer["endorsements"][:1]  # only Org1 endorsed
    result = ledger.order(json.dumps(outer).encode()).result()
    assert result.code == "ENDORSEMENT_POLICY_FAILURE"
    assert "node:n1" not in ledger.store.state


def test_same_envelope_twice_is_a_duplicate(ledger):
    envelope = endorsed(ledger, ledger.enroll("Org1MSP", "a"), "RegisterNode", node_request("n1"))
    codes = [ledger.order(envelope).result().code, ledger.order(envelope).result().code]
    assert codes == ["VALID", "DUPLICATE_TXID"]


def test_stale_read_is_an_mvcc_conflict_and_client_gets_transaction_invalid(ledger):
    identity = ledger.enroll("Org1MSP", "a")
    first = endorsed(ledger, identity, "RegisterNode", node_request("n1"))
    second = endorsed(ledger, identity, "RegisterNode", node_request("n1"))  # same reads
    assert ledger.order(first).result().code == "VALID"
    assert ledger.order(second).result().code == "MVCC_READ_CONFLICT"
    client = EmbeddedClient(ledger, identity)
    assert client.evaluate("GetNode", js({"node_id": "n1"}))
    assert verify_ledger(ledger.store.path).ok


def test_phantom_read_detected():
    state = DictState()
    state.apply(1, 0, {"a:1": b"x"})
    rwset = RwSet(ranges=[("a:", "a;", [("a:1", (1, 0))])])
    assert check_mvcc(rwset, state) is None
    state.apply(2, 0, {"a:2": b"y"})
    assert check_mvcc(rwset, state) == "PHANTOM_READ_CONFLICT"


def test_events_replay_then_follow_live(ledger):
    client = EmbeddedClient(ledger, ledger.enroll("Org1MSP", "a"))
    first = client.submit("RegisterNode", node_request("n1"))
    seen = []

    def follow() -> None:
        for event in client.events(start_block=first.block_number):
            seen.append((event.name, json.loads(event.payload)["node_id"]))
            if len(seen) == 2:
                return

    reader = threading.Thread(target=follow)
    reader.start()
    client.submit("RegisterNode", node_request("n2"))
    reader.join(timeout=10)
    assert seen == [("NodeRegistered", "n1"), ("NodeRegistered", "n2")]
    client.close()


def test_reopen_keeps_chain_config_and_keys(tmp_path):
    path = tmp_path / "l.sqlite"
    ledger = EmbeddedLedger.open(path, block_timeout_s=0.001)
    EmbeddedClient(ledger, ledger.enroll("Org1MSP", "a")).submit("RegisterNode", node_request("n1"))
    ledger.close()
    assert oct((path.parent / "l.sqlite.msp/Org1MSP/peer/key.pem").stat().st_mode)[-3:] == "600"
    again = EmbeddedLedger.open(path, orgs=("Ignored",), block_timeout_s=0.001)
    assert again.msp.mspids == ["Org1MSP", "Org2MSP"]
    client = EmbeddedClient(again, again.enroll("Org2MSP", "b"))
    assert json.loads(client.evaluate("GetNode", js({"node_id": "n1"})))["org"] == "Org1MSP"
    again.close()
