"""The embedded backend honours the LedgerClient contract."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal

import pytest

from chaincode_client.embedded import EmbeddedClient
from chaincode_client.interface import (
    EndorsementError,
    LedgerClient,
    LedgerUnavailable,
    Receipt,
    TransactionInvalid,
)
from ledger.engine import EmbeddedLedger
from tests.ledger.helpers import ZERO_POLICY_ID, node_ak_b64, open_ledger


def node(node_id: str) -> str:
    return json.dumps(
        {
            "node_id": node_id,
            "org": "Org1MSP",
            "ak_public": node_ak_b64(node_id),
            "gpus": [{"uuid": f"GPU-{node_id}", "generation": "A100"}],
            "pcr_policy_id": ZERO_POLICY_ID,
        }
    )


@pytest.fixture
def client(tmp_path):
    ledger = open_ledger(tmp_path / "l.sqlite", block_timeout_s=0.001)
    yield EmbeddedClient(ledger, ledger.enroll("Org1MSP", "app"))
    ledger.close()


def test_submit_returns_a_committed_receipt_with_payload(client: LedgerClient):
    receipt = client.submit("RegisterNode", node("n1"))
    assert isinstance(receipt, Receipt) and receipt.valid
    assert receipt.block_number == client.engine.height - 1  # the last block committed
    assert json.loads(receipt.payload)["registered_tx"] == receipt.tx_id
    assert json.loads(client.evaluate("GetNode", json.dumps({"node_id": "n1"})))["node_id"]


def test_non_string_arguments_are_refused(client):
    with pytest.raises(EndorsementError, match="must be a string"):
        client.submit("GetNode", {"node_id": "n1"})  # type: ignore[arg-type]


def test_a_closed_ledger_is_unavailable_instead_of_hanging(tmp_path):
    ledger = EmbeddedLedger.open(tmp_path / "l.sqlite")
    client = EmbeddedClient(ledger, ledger.enroll("Org1MSP", "app"))
    ledger.close()
    with pytest.raises(LedgerUnavailable, match="closed"):
        client.submit("RegisterNode", node("n1"))


def test_pending_commits_share_a_block_and_each_gets_its_receipt(tmp_path):
    ledger = open_ledger(tmp_path / "l.sqlite", block_timeout_s=0.2)
    client = EmbeddedClient(ledger, ledger.enroll("Org1MSP", "app"))
    try:
        pending = [client.submit_async("RegisterNode", node(f"n{i}")) for i in range(5)]
        receipts = [p.receipt() for p in pending]
    finally:
        ledger.close()
    assert [r.tx_id for r in receipts] == [p.tx_id for p in pending]
    assert all(r.valid for r in receipts)
    assert len({r.block_number for r in receipts}) == 1  # ordered together, not a block each
    assert [json.loads(r.payload)["node_id"] for r in receipts] == [f"n{i}" for i in range(5)]


def test_a_pending_commit_that_loses_on_mvcc_raises_at_receipt(tmp_path):
    ledger = open_ledger(tmp_path / "l.sqlite", block_timeout_s=0.2)
    client = EmbeddedClient(ledger, ledger.enroll("Org1MSP", "app"))
    try:
        client.submit("RegisterNode", node("n1"))
        revoke = json.dumps({"node_id": "n1", "reason": "test"})
        first, second = (
            client.submit_async("RevokeAK", revoke),
            client.submit_async("RevokeAK", revoke),
        )  # both simulated against the same state: the second's read is stale at commit
        assert first.receipt().valid
        with pytest.raises(TransactionInvalid) as info:
            second.receipt()
    finally:
        ledger.close()
    assert info.value.receipt.validation_code == "MVCC_READ_CONFLICT"


def test_a_refused_proposal_raises_at_submit_async(client):
    with pytest.raises(EndorsementError, match="node ghost is not registered"):
        client.submit_async("RevokeAK", json.dumps({"node_id": "ghost", "reason": ""}))


def test_with_peer_processes_a_refusal_comes_from_the_receipt(tmp_path):
    ledger = open_ledger(tmp_path / "l.sqlite", block_timeout_s=0.05, peer_processes=True)
    client = EmbeddedClient(ledger, ledger.enroll("Org1MSP", "app"))
    try:
        pending = [client.submit_async("RegisterNode", node(f"n{i}")) for i in range(20)]
        refused = client.submit_async("RevokeAK", json.dumps({"node_id": "ghost", "reason": ""}))
        receipts = [p.receipt() for p in pending]
        with pytest.raises(EndorsementError, match="node ghost is not registered"):
            refused.receipt()
        assert json.loads(client.evaluate("GetNode", json.dumps({"node_id": "n19"})))["org"]
    finally:
        ledger.close()
    assert all(r.valid for r in receipts) and len({r.tx_id for r in receipts}) == 20
    assert len({r.block_number for r in receipts}) < 20  # batched, not a block each


def test_a_dead_peer_process_makes_the_ledger_unavailable_not_hung(tmp_path):
    ledger = open_ledger(tmp_path / "l.sqlite", block_timeout_s=0.01, peer_processes=True)
    client = EmbeddedClient(ledger, ledger.enroll("Org1MSP", "app"))
    try:
        assert client.submit("RegisterNode", node("n1")).valid
        children = multiprocessing.active_children()
        (worker,) = [p for p in children if p.name == "ledger-peer-Org1MSP"]
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(timeout=10)
        with pytest.raises(LedgerUnavailable, match="peer process ledger-peer-Org1MSP failed"):
            client.submit("RegisterNode", node("n2"))  # the dispatcher finds the pipe closed
        with pytest.raises(LedgerUnavailable, match="peer process ledger-peer-Org1MSP failed"):
            client.submit_async("RegisterNode", node("n3"))  # and the ledger says so up front
        assert json.loads(client.evaluate("GetNode", json.dumps({"node_id": "n1"})))["org"]
    finally:
        ledger.close()
