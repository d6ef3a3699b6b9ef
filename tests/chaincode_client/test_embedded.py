"""The embedded backend honours the LedgerClient contract."""

from __future__ import annotations

import base64
import json

import pytest

from chaincode_client.embedded import EmbeddedClient
from chaincode_client.interface import EndorsementError, LedgerClient, LedgerUnavailable, Receipt
from ledger.engine import EmbeddedLedger


def node(node_id: str) -> str:
    return json.dumps(
        {
            "node_id": node_id,
            "org": "Org1MSP",
            "ak_public": base64.b64encode(b"ak").decode(),
            "gpus": [{"uuid": f"GPU-{node_id}", "generation": "A100"}],
            "pcr_policy": {"pcrs": {"sha256": {"7": "ab" * 32}}, "max_age_s": 30},
        }
    )


@pytest.fixture
def client(tmp_path):
    ledger = EmbeddedLedger.open(tmp_path / "l.sqlite", block_timeout_s=0.001)
    yield EmbeddedClient(ledger, ledger.enroll("Org1MSP", "app"))
    ledger.close()


def test_submit_returns_a_committed_receipt_with_payload(client: LedgerClient):
    receipt = client.submit("RegisterNode", node("n1"))
    assert isinstance(receipt, Receipt) and receipt.valid and receipt.block_number == 1
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
