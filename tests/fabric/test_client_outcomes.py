"""How the gateway client reports each outcome the gateway can give (the wire shapes are
held to the official client's by test_node_conformance.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from fabric_protos.peer import transaction_pb2

from chaincode_client.fabric.client import FabricGatewayClient
from chaincode_client.fabric.identity import load_msp
from chaincode_client.interface import EndorsementError, LedgerUnavailable, TransactionInvalid
from tests.fabric.pki import make_msp
from tests.fabric.recording_gateway import COMMIT_BLOCK, RecordingGateway, recording_gateway


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[RecordingGateway, FabricGatewayClient]]:
    identity, signer = load_msp(make_msp(tmp_path), "Org1MSP")
    with recording_gateway() as (recorder, port):
        client = FabricGatewayClient(
            grpc.insecure_channel(f"127.0.0.1:{port}"),
            identity,
            signer,
            "wattlease",
            "wattlease",
            ("Org1MSP", "Org2MSP"),
        )
        yield recorder, client
        client.close()


def test_valid_commit_returns_a_receipt(gateway):  # type: ignore[no-untyped-def]
    recorder, client = gateway
    receipt = client.submit("CreateLease", "{}")
    assert (receipt.valid, receipt.block_number) == (True, COMMIT_BLOCK)
    assert receipt.tx_id == recorder.requests["Endorse"][0].transaction_id
    assert list(recorder.requests["Endorse"][0].endorsing_organizations) == ["Org1MSP", "Org2MSP"]


def test_mvcc_conflict_raises_transaction_invalid_with_the_code(gateway):  # type: ignore[no-untyped-def]
    recorder, client = gateway
    recorder.commit_code = transaction_pb2.MVCC_READ_CONFLICT
    with pytest.raises(TransactionInvalid) as info:
        client.submit("CreateLease", "{}")
    assert info.value.receipt.validation_code == "MVCC_READ_CONFLICT"
    assert info.value.receipt.block_number == COMMIT_BLOCK


def test_orderer_down_at_submit_is_retryable(gateway):  # type: ignore[no-untyped-def]
    recorder, client = gateway
    recorder.submit_failure = grpc.StatusCode.UNAVAILABLE
    with pytest.raises(LedgerUnavailable, match="submit failed \\(UNAVAILABLE\\)"):
        client.submit("CreateLease", "{}")
    assert "CommitStatus" not in recorder.requests


def test_error_status_in_an_evaluate_result_is_an_endorsement_error(gateway):  # type: ignore[no-untyped-def]
    recorder, client = gateway
    recorder.evaluate_status = 500
    with pytest.raises(EndorsementError, match="500: refused"):
        client.evaluate("GetLease", "{}")


def test_events_refuse_a_negative_start_block(gateway):  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="negative"):
        gateway[1].events(-1)


def test_orderer_refusing_the_transaction_is_not_retried(gateway):  # type: ignore[no-untyped-def]
    recorder, client = gateway
    recorder.submit_failure = grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(EndorsementError, match="submit failed \\(PERMISSION_DENIED\\)"):
        client.submit("CreateLease", "{}")


def test_submit_async_returns_before_the_commit_status_is_asked(gateway):  # type: ignore[no-untyped-def]
    recorder, client = gateway
    pending = client.submit_async("CreateLease", "{}")
    assert pending.tx_id == recorder.requests["Submit"][0].transaction_id
    assert "CommitStatus" not in recorder.requests
    recorder.commit_code = transaction_pb2.MVCC_READ_CONFLICT
    with pytest.raises(TransactionInvalid) as info:
        pending.receipt()
    assert info.value.receipt.validation_code == "MVCC_READ_CONFLICT"
    assert recorder.requests["CommitStatus"][0].signature  # signed by the client


def test_check_endorsable_endorses_with_every_org_and_orders_nothing(gateway):  # type: ignore[no-untyped-def]
    recorder, client = gateway
    client.check_endorsable("GetHistory", "{}")
    assert list(recorder.requests["Endorse"][0].endorsing_organizations) == ["Org1MSP", "Org2MSP"]
    assert "Submit" not in recorder.requests


def test_check_endorsable_reports_a_gateway_that_cannot_meet_the_policy(gateway):  # type: ignore[no-untyped-def]
    recorder, client = gateway
    recorder.endorse_failure = (
        grpc.StatusCode.FAILED_PRECONDITION,
        "no combination of peers can be derived which satisfy the endorsement policy: "
        "required chaincodes are not installed on sufficient peers",
    )
    with pytest.raises(LedgerUnavailable, match="not installed on sufficient peers"):
        client.check_endorsable("GetHistory", "{}")
    assert "Submit" not in recorder.requests
