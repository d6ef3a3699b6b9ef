# mypy: disable-error-code="attr-defined,name-defined"
# (fabric_protos ships py.typed but no stubs for its generated _pb2 modules)
"""A small adapter over fabric-chaincode-python 2.5.4's chaincode server (not a fork).

It closes three gaps of that release, each covered by tests/fabric/test_shim_adapter.py:

1. Events set with `stub.set_event` are kept on the stub but never put in the COMPLETED
   message, so the peer never sees them. `EventfulHandler` builds the COMPLETED message
   itself and attaches the event (Fabric carries one event per transaction; as in the Go
   shim, the last `set_event` wins).
2. A peer ERROR reply to GET_STATE / PUT_STATE / ... resolves the waiting call as if it were
   data: `get_state` returns the error text as the value. `StrictQueueHandler` makes such
   replies raise `PeerReplyError`, which the contract API turns into a refused proposal.
3. `grpc.aio.server()` is created with gRPC's defaults, which allow a client ping at most
   every 5 minutes and send GOAWAY ("too_many_pings") after two faster ones. The peer's
   chaincode connection pings every 60s by default (peer.keepalive.client.interval), so the
   idle connection is cut. `serve()` creates the server with keepalive settings that accept
   the peer's pings and detect a dead peer.

4. Each message from the peer is handled in a task of its own, so with two transactions in
   flight two tasks write to the stream at once; gRPC's asyncio API allows one write in
   flight per stream and fails the second (GRPC_CALL_ERROR_TOO_MANY_OPERATIONS), leaving the
   peer to time out. `SerialWriter` queues the writes of one stream behind a lock.

It also answers a contract that raises, or returns nothing, with an ERROR response instead
of leaving the peer waiting until its execute timeout.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
from fabric_chaincode_python.fabric_shim.handler import Handler
from fabric_chaincode_python.fabric_shim.interfaces import Chaincode
from fabric_chaincode_python.fabric_shim.msg_queue_handler import MsgQueueHandler, QueueMessage
from fabric_chaincode_python.fabric_shim.response import ResponseCode
from fabric_chaincode_python.fabric_shim.server import ChaincodeService, load_tls_config
from fabric_chaincode_python.fabric_shim.stub import ChaincodeStub
from fabric_protos.peer import chaincode_pb2, chaincode_shim_pb2, proposal_response_pb2
from fabric_protos.peer import chaincode_shim_pb2_grpc as shim_grpc

LOG = logging.getLogger(__name__)

# Accept the peer's keepalive pings down to this interval (peer default 60s; tests use less),
# with or without an RPC in flight, and never count them as strikes.
MIN_PEER_PING_INTERVAL_MS = 5_000
# Our own pings find a peer that vanished without closing the connection.
SERVER_KEEPALIVE_TIME_MS = 30_000
SERVER_KEEPALIVE_TIMEOUT_MS = 10_000
MAX_MESSAGE_BYTES = 100 * 1024 * 1024  # the peer's own gRPC limit
SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.http2.min_recv_ping_interval_without_data_ms", MIN_PEER_PING_INTERVAL_MS),
    ("grpc.http2.min_ping_interval_without_data_ms", MIN_PEER_PING_INTERVAL_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.keepalive_time_ms", SERVER_KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", SERVER_KEEPALIVE_TIMEOUT_MS),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)
MAX_ERROR_TEXT = 2000


class PeerReplyError(Exception):
    """The peer answered a chaincode request (GET_STATE, PUT_STATE, ...) with ERROR."""


def _strict_success(message: QueueMessage, reply: chaincode_shim_pb2.ChaincodeMessage) -> None:
    if message.future.done():
        return
    if reply.type == chaincode_shim_pb2.ChaincodeMessage.ERROR:
        text = reply.payload[:MAX_ERROR_TEXT].decode("utf-8", "replace")
        message.future.set_exception(PeerReplyError(f"peer refused {message.get_method()}: {text}"))
    else:
        message.future.set_result(reply)


class StrictQueueHandler(MsgQueueHandler):
    """MsgQueueHandler whose ERROR replies raise in the waiting chaincode call."""

    async def queue_msg(self, msg: QueueMessage) -> None:
        msg.success = lambda reply: _strict_success(msg, reply)  # type: ignore[method-assign]
        await super().queue_msg(msg)


class SerialWriter:
    """A servicer context whose `write`s go out one at a time; everything else passes
    through. gRPC's asyncio streams allow one write in flight, and the shim writes from one
    task per transaction."""

    def __init__(self, context: Any) -> None:
        self._context = context
        self._lock = asyncio.Lock()

    async def write(self, message: Any) -> None:
        async with self._lock:
            await self._context.write(message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


class EventfulHandler(Handler):
    """The shim's Handler with the fixes above."""

    @property  # type: ignore[override]
    def context(self) -> Any:
        return self._context

    @context.setter
    def context(self, value: Any) -> None:
        # chat_with_peer() stores the stream's context here; every write goes through it.
        self._context = None if value is None else SerialWriter(value)

    @property  # type: ignore[override]
    def msg_queue_handler(self) -> MsgQueueHandler | None:
        return self._queue

    @msg_queue_handler.setter
    def msg_queue_handler(self, value: MsgQueueHandler | None) -> None:
        # chat_with_peer() creates a plain MsgQueueHandler; swap in the strict one.
        if value is not None and type(value) is MsgQueueHandler:
            value = StrictQueueHandler(self)
        self._queue = value

    async def handle_stub_interaction(self, msg: Any, action: str = "Invoke") -> None:
        response, stub = await self._run(msg, action)
        completed = chaincode_shim_pb2.ChaincodeMessage(
            type=chaincode_shim_pb2.ChaincodeMessage.COMPLETED,
            payload=response.SerializeToString(),
            txid=msg.txid,
            channel_id=msg.channel_id,
        )
        events = stub.get_events() if stub is not None else []
        if events and response.status < ResponseCode.ERRORTHRESHOLD:
            if len(events) > 1:
                LOG.warning(
                    "tx %s set %d events; Fabric keeps only the last", msg.txid, len(events)
                )
            completed.chaincode_event.CopyFrom(events[-1])
        await self.context.write(completed)

    async def _run(
        self, msg: Any, action: str
    ) -> tuple[proposal_response_pb2.Response, ChaincodeStub | None]:
        stub = None
        try:
            cc_input = chaincode_pb2.ChaincodeInput.FromString(msg.payload)
            stub = ChaincodeStub(self, msg.channel_id, msg.txid, cc_input, msg.proposal)
            if action.lower() == "init":
                response = await self.chaincode.init(stub)
            else:
                response = await self.chaincode.invoke(stub)
        except Exception as exc:  # the peer must get an answer, never a silent stall
            LOG.exception("chaincode %s failed for tx %s", action, msg.txid)
            return _error(f"chaincode {action} raised {type(exc).__name__}: {exc}"), stub
        if not response or not response.status:
            return _error(f"chaincode {action} returned no response"), stub
        return response, stub


def _error(message: str) -> proposal_response_pb2.Response:
    return proposal_response_pb2.Response(
        status=ResponseCode.ERROR, message=message[:MAX_ERROR_TEXT]
    )


class AdaptedChaincodeService(ChaincodeService):
    async def Connect(self, request_iterator, context):  # type: ignore[no-untyped-def]
        try:
            await EventfulHandler(self._ccid, self._cc).chat_with_peer(request_iterator, context)
        except asyncio.CancelledError:
            LOG.info("peer stream cancelled")


def make_server(
    chaincode: Chaincode,
    ccid: str,
    address: str,
    tls_key: bytes | None = None,
    tls_cert: bytes | None = None,
    client_ca: bytes | None = None,
) -> tuple[grpc.aio.Server, int]:
    """A chaincode server for the peer to dial (CCaaS), not yet started; returns the port."""
    server = grpc.aio.server(options=list(SERVER_OPTIONS))
    if tls_key and tls_cert:
        port = server.add_secure_port(address, load_tls_config(tls_key, tls_cert, client_ca))
    else:
        port = server.add_insecure_port(address)
    shim_grpc.add_ChaincodeServicer_to_server(AdaptedChaincodeService(ccid, chaincode), server)
    return server, port


async def serve(chaincode: Chaincode, ccid: str, address: str, **tls: bytes | None) -> None:
    """Run the chaincode server until cancelled."""
    server, port = make_server(chaincode, ccid, address, **tls)
    await server.start()
    LOG.info("chaincode %s listening on port %d", ccid, port)
    try:
        await server.wait_for_termination()
    finally:
        await server.stop(3)
