"""The fabric-chaincode-python 2.5.4 gaps and the adapter that closes them. Each test runs
the adapted server and, as the control, the library's own server, so a library release that
fixes a gap shows up here."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import pytest
from fabric_chaincode_python.fabric_shim.interfaces import Chaincode
from fabric_chaincode_python.fabric_shim.server import ChaincodeService
from fabric_protos.peer import chaincode_shim_pb2
from fabric_protos.peer import chaincode_shim_pb2_grpc as shim_grpc

from chaincode_client.fabric.identity import load_msp
from chaincode_client.fabric_network.shim_adapter import make_server
from tests.fabric.demo_contract import new_chaincode
from tests.fabric.pki import make_msp
from tests.fabric.shim_driver import PeerDriver

Msg = chaincode_shim_pb2.ChaincodeMessage
IDLE_S = 6  # several of the driver's 1s keepalive pings


def _plain_server() -> tuple[grpc.aio.Server, int]:
    """The library's own server setup: default gRPC options, unadapted handler."""
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    shim_grpc.add_ChaincodeServicer_to_server(ChaincodeService("demo:1", new_chaincode()), server)
    return server, port


def _adapted_server() -> tuple[grpc.aio.Server, int]:
    return make_server(new_chaincode(), "demo:1", "127.0.0.1:0")


def _run(
    make: Callable[[], tuple[grpc.aio.Server, int]],
    tmp: Path,
    scenario: Callable[[PeerDriver], Awaitable[object]],
    **driver: object,
) -> object:
    identity, signer = load_msp(make_msp(tmp), "Org1MSP")

    async def main() -> object:
        server, port = make()
        await server.start()
        try:
            async with PeerDriver(f"127.0.0.1:{port}", identity, signer, **driver) as peer:
                return await asyncio.wait_for(scenario(peer), timeout=60)
        finally:
            await server.stop(None)

    return asyncio.run(main())


async def _put(peer: PeerDriver) -> Msg:
    response, completed = await peer.invoke("Put", "k1", "v1")
    assert response.status == 200, response.message
    return completed


def test_set_event_reaches_the_peer(tmp_path: Path):
    completed = _run(_adapted_server, tmp_path, _put)
    assert completed.HasField("chaincode_event")
    assert completed.chaincode_event.event_name == "Put"
    assert completed.chaincode_event.payload == b"k1=v1"
    assert completed.chaincode_event.tx_id == completed.txid


def test_control_library_server_drops_the_event(tmp_path: Path):
    completed = _run(_plain_server, tmp_path, _put)
    assert not completed.HasField("chaincode_event")


async def _get(peer: PeerDriver) -> object:
    return (await peer.invoke("Get", "k1"))[0]


def test_peer_error_reply_refuses_the_proposal(tmp_path: Path):
    response = _run(_adapted_server, tmp_path, _get, refuse=frozenset({Msg.GET_STATE}))
    assert response.status == 500
    assert "peer refused GetState: simulated peer refusal" in response.message


def test_control_library_server_returns_the_error_as_data(tmp_path: Path):
    response = _run(_plain_server, tmp_path, _get, refuse=frozenset({Msg.GET_STATE}))
    assert response.status == 200
    assert b"simulated peer refusal" in response.payload


async def _idle_then_put(peer: PeerDriver) -> Msg:
    await asyncio.sleep(IDLE_S)
    return await _put(peer)


def test_idle_peer_connection_survives_keepalive_pings(tmp_path: Path):
    completed = _run(_adapted_server, tmp_path, _idle_then_put)
    assert completed.chaincode_event.event_name == "Put"


def test_control_library_server_cuts_the_idle_peer_connection(tmp_path: Path):
    # gRPC's defaults answer the pings with GOAWAY "too_many_pings"; the stream is gone, so
    # the next write fails (InvalidStateError) or the read does (UNAVAILABLE / EOF).
    with pytest.raises((grpc.aio.AioRpcError, ConnectionError, asyncio.InvalidStateError)) as info:
        _run(_plain_server, tmp_path, _idle_then_put)
    if isinstance(info.value, grpc.aio.AioRpcError):
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE


class _Broken(Chaincode):
    async def init(self, stub):  # type: ignore[no-untyped-def]
        raise RuntimeError("init exploded")

    async def invoke(self, stub):  # type: ignore[no-untyped-def]
        raise RuntimeError("invoke exploded")


def test_a_chaincode_that_raises_answers_the_peer_at_once(tmp_path: Path):
    def make() -> tuple[grpc.aio.Server, int]:
        return make_server(_Broken(), "demo:1", "127.0.0.1:0")

    async def scenario(peer: PeerDriver) -> object:
        return (await peer.invoke("Put", "k", "v"))[0]

    response = _run(make, tmp_path, scenario)
    assert response.status == 500
    assert "RuntimeError: invoke exploded" in response.message
