"""Gateway errors become typed ledger errors carrying each peer's message. The errors come
from real gRPC calls: a real unreachable TLS endpoint, and an in-process gRPC server that
fails the Gateway methods with status details shaped as Fabric's gateway sends them."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from fabric_protos.gateway import gateway_pb2
from google.protobuf import any_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from chaincode_client.fabric.client import FabricGatewayClient
from chaincode_client.fabric.config import FabricSettings
from chaincode_client.fabric.errors import (
    STATUS_DETAILS_KEY,
    _Status,
    parse_status_details,
)
from chaincode_client.interface import EndorsementError, LedgerUnavailable, PeersBehind
from tests.fabric.pki import make_msp, make_tls_ca


def _details(*peers: tuple[str, str, str]) -> bytes:
    status = _Status(code=10, message="failed to endorse transaction")
    for address, msp, message in peers:
        packed = any_pb2.Any(
            type_url="type.googleapis.com/gateway.ErrorDetail",
            value=gateway_pb2.ErrorDetail(
                address=address, msp_id=msp, message=message
            ).SerializeToString(),
        )
        status.details.add(type_url=packed.type_url, value=packed.value)
    return status.SerializeToString()


def test_parses_one_error_per_peer():
    found = parse_status_details(
        _details(
            ("peer0.org1:7051", "Org1MSP", "chaincode response 500, no"),
            ("peer0.org2:9051", "Org2MSP", "chaincode response 500, no"),
        )
    )
    assert [(p.msp_id, p.message) for p in found] == [
        ("Org1MSP", "chaincode response 500, no"),
        ("Org2MSP", "chaincode response 500, no"),
    ]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_arbitrary_trailer_bytes_never_raise(data: bytes):
    assert isinstance(parse_status_details(data), list)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _settings(tmp_path: Path, port: int) -> FabricSettings:
    return FabricSettings(
        endpoint=f"127.0.0.1:{port}",
        tls_ca=make_tls_ca(tmp_path),
        msp_id="Org1MSP",
        msp_dir=make_msp(tmp_path / "msp"),
    )


def test_unreachable_peer_raises_ledger_unavailable(tmp_path: Path):
    client = FabricGatewayClient.from_settings(_settings(tmp_path, _free_port()))
    try:
        with pytest.raises(LedgerUnavailable, match="UNAVAILABLE"):
            client.evaluate("ReadNode", "n1")
        with pytest.raises(LedgerUnavailable):
            client.submit("RegisterNode", "{}")
    finally:
        client.close()


class _FailingGateway(grpc.GenericRpcHandler):
    """Answers Endorse like Fabric's gateway when both orgs' chaincode refused."""

    def __init__(
        self,
        code: grpc.StatusCode,
        peers: tuple[tuple[str, str, str], ...],
        message: str = "failed to endorse transaction, see attached details",
    ) -> None:
        self.code, self.peers, self.message = code, peers, message

    def service(self, handler_call_details):  # type: ignore[no-untyped-def]
        def fail(request, context):  # type: ignore[no-untyped-def]
            context.set_trailing_metadata([(STATUS_DETAILS_KEY, _details(*self.peers))])
            context.abort(self.code, self.message)

        return grpc.unary_unary_rpc_method_handler(fail)


@pytest.fixture
def failing_gateway(request: pytest.FixtureRequest) -> Iterator[grpc.Channel]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((_FailingGateway(*request.param),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield channel
    channel.close()
    server.stop(None).wait()


REFUSED = (
    grpc.StatusCode.ABORTED,
    (
        ("127.0.0.1:7051", "Org1MSP", "chaincode response 500, lease L1 already settled"),
        ("127.0.0.1:9051", "Org2MSP", "chaincode response 500, lease L1 already settled"),
    ),
)
NOT_READY = (
    grpc.StatusCode.ABORTED,
    (("127.0.0.1:7051", "Org1MSP", "error in simulation: could not launch chaincode wattlease"),),
)


DISAGREE = (  # the gateway could not assemble the transaction: the peers' results differ
    grpc.StatusCode.ABORTED,
    (),
    "failed to assemble transaction: ProposalResponsePayloads do not match",
)


def _client(channel: grpc.Channel, tmp_path: Path) -> FabricGatewayClient:
    from chaincode_client.fabric.identity import load_msp

    identity, signer = load_msp(make_msp(tmp_path), "Org1MSP")
    return FabricGatewayClient(channel, identity, signer, "wattlease", "wattlease")


@pytest.mark.parametrize("failing_gateway", [REFUSED], indirect=True)
def test_refused_endorsement_names_each_peer(failing_gateway: grpc.Channel, tmp_path: Path):
    with pytest.raises(EndorsementError) as info:
        _client(failing_gateway, tmp_path).submit("SettleLease", "L1")
    text = str(info.value)
    assert "Org1MSP@127.0.0.1:7051: chaincode response 500, lease L1 already settled" in text
    assert "Org2MSP@127.0.0.1:9051" in text
    assert len(info.value.peer_errors) == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("failing_gateway", [NOT_READY], indirect=True)
def test_chaincode_not_ready_is_retryable(failing_gateway: grpc.Channel, tmp_path: Path):
    with pytest.raises(LedgerUnavailable, match="could not launch chaincode"):
        _client(failing_gateway, tmp_path).submit("SettleLease", "L1")


@pytest.mark.parametrize("failing_gateway", [DISAGREE], indirect=True)
def test_peers_that_disagree_are_retryable(failing_gateway: grpc.Channel, tmp_path: Path):
    with pytest.raises(PeersBehind, match="ProposalResponsePayloads do not match"):
        _client(failing_gateway, tmp_path).submit("SettleLease", "L1")


PEER_CLOSING = (  # a peer killed mid-endorsement, as the gateway reports it (issue 10, defect 3)
    grpc.StatusCode.ABORTED,
    (
        (
            "127.0.0.1:9051",
            "Org2MSP",
            "rpc error: code = Canceled desc = grpc: the client connection is closing",
        ),
    ),
    "failed to collect enough transaction endorsements, see attached details for more info",
)
NO_PEERS_YET = (  # discovery has not learnt the other organisation's peer yet
    grpc.StatusCode.FAILED_PRECONDITION,
    (),
    "no combination of peers can be derived which satisfy the endorsement policy: "
    "no peer combination can satisfy the endorsement policy",
)


@pytest.mark.parametrize("failing_gateway", [PEER_CLOSING, NO_PEERS_YET], indirect=True)
def test_a_peer_that_went_away_is_retryable(failing_gateway: grpc.Channel, tmp_path: Path):
    with pytest.raises(LedgerUnavailable):
        _client(failing_gateway, tmp_path).submit("CreateLease", "{}")


ACCESS_DENIED = (
    grpc.StatusCode.PERMISSION_DENIED,
    (),
    "evaluate call to endorser returned error: access denied: channel [wattlease] creator org "
    "unknown, creator is malformed",
)


@pytest.mark.parametrize("failing_gateway", [ACCESS_DENIED], indirect=True)
def test_a_creator_the_channel_refuses_has_the_creator_reason(
    failing_gateway: grpc.Channel, tmp_path: Path
):
    with pytest.raises(EndorsementError) as info:
        _client(failing_gateway, tmp_path).evaluate("GetLease", "{}")
    assert info.value.reason == "creator"


OTHER_ORG_LAGS = (  # our own peer endorsed; the other organisation's had not seen our commit
    grpc.StatusCode.ABORTED,
    (("127.0.0.1:9051", "Org2MSP", "chaincode response 500, lease L1 does not exist"),),
    "failed to collect enough transaction endorsements, see attached details for more info",
)


@pytest.mark.parametrize("failing_gateway", [OTHER_ORG_LAGS], indirect=True)
def test_a_refusal_by_another_organisation_only_is_retryable(
    failing_gateway: grpc.Channel, tmp_path: Path
):
    with pytest.raises(PeersBehind, match="lease L1 does not exist") as info:
        _client(failing_gateway, tmp_path).submit("EndLease", "{}")
    assert str(info.value).startswith("another organisation's peer is behind: endorse failed")


@pytest.mark.parametrize("failing_gateway", [NOT_READY, PEER_CLOSING, NO_PEERS_YET], indirect=True)
def test_a_peer_down_or_not_ready_is_not_a_peer_behind(
    failing_gateway: grpc.Channel, tmp_path: Path
):
    """Only a disagreement is polled quickly by the relay; a peer that is down or a chaincode
    not yet running backs off as any fault does."""
    with pytest.raises(LedgerUnavailable) as info:
        _client(failing_gateway, tmp_path).submit("EndLease", "{}")
    assert not isinstance(info.value, PeersBehind)
