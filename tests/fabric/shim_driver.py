"""Drives a chaincode server over real gRPC with the peer's side of the chaincode shim
protocol (REGISTER -> REGISTERED -> READY -> TRANSACTION ... COMPLETED), answering the
chaincode's state requests from a dict. It exists because this machine cannot build the real
peer (see docs/fabric.md); it checks the adapter's wire behaviour, not Fabric's."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc
from fabric_protos.peer import chaincode_pb2, chaincode_shim_pb2, proposal_response_pb2
from fabric_protos.peer import chaincode_shim_pb2_grpc as shim_grpc

from chaincode_client.fabric.identity import Identity, Signer
from chaincode_client.fabric.proposals import build_proposal

Msg = chaincode_shim_pb2.ChaincodeMessage
# Like the peer's chaincode client, but pinging far more often so a test sees the effect in
# seconds rather than minutes.
PEER_LIKE_OPTIONS = [
    ("grpc.keepalive_time_ms", 1000),
    ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]


@dataclass
class Completed:
    response: proposal_response_pb2.Response
    event: chaincode_shim_pb2.ChaincodeMessage | None


@dataclass
class PeerDriver:
    address: str
    identity: Identity
    signer: Signer
    state: dict[str, bytes] = field(default_factory=dict)
    refuse: frozenset[int] = frozenset()  # message types answered with ERROR
    channel_id: str = "wattlease"
    chaincode: str = "demo"

    async def __aenter__(self) -> PeerDriver:
        self._channel = grpc.aio.insecure_channel(self.address, options=PEER_LIKE_OPTIONS)
        self._call = shim_grpc.ChaincodeStub(self._channel).Connect()
        first = await self._call.read()
        assert first.type == Msg.REGISTER, first
        await self._call.write(Msg(type=Msg.REGISTERED))
        await self._call.write(Msg(type=Msg.READY))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._call.done_writing()
        await self._channel.close()

    async def invoke(self, fn: str, *args: str) -> tuple[proposal_response_pb2.Response, Msg]:
        signed = build_proposal(
            self.identity, self.signer, self.channel_id, self.chaincode, fn, args
        )
        cc_input = chaincode_pb2.ChaincodeInput(args=[fn.encode(), *(a.encode() for a in args)])
        await self._call.write(
            Msg(
                type=Msg.TRANSACTION,
                payload=cc_input.SerializeToString(),
                txid=signed.tx_id,
                channel_id=self.channel_id,
                proposal=signed.proposal,
            )
        )
        while True:
            msg = await self._call.read()
            if msg is grpc.aio.EOF:
                raise ConnectionError("chaincode closed the stream")
            if msg.type == Msg.COMPLETED:
                return proposal_response_pb2.Response.FromString(msg.payload), msg
            await self._call.write(self._answer(msg))

    def _answer(self, msg: Msg) -> Msg:
        reply = Msg(type=Msg.RESPONSE, txid=msg.txid, channel_id=msg.channel_id)
        if msg.type in self.refuse:
            return Msg(
                type=Msg.ERROR,
                txid=msg.txid,
                channel_id=msg.channel_id,
                payload=b"simulated peer refusal",
            )
        if msg.type == Msg.GET_STATE:
            reply.payload = self.state.get(
                chaincode_shim_pb2.GetState.FromString(msg.payload).key, b""
            )
        elif msg.type == Msg.PUT_STATE:
            put = chaincode_shim_pb2.PutState.FromString(msg.payload)
            self.state[put.key] = put.value
        elif msg.type == Msg.DEL_STATE:
            self.state.pop(chaincode_shim_pb2.DelState.FromString(msg.payload).key, None)
        else:
            return Msg(
                type=Msg.ERROR,
                txid=msg.txid,
                channel_id=msg.channel_id,
                payload=f"driver does not handle {Msg.Type.Name(msg.type)}".encode(),
            )
        return reply
