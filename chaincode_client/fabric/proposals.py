# mypy: disable-error-code="attr-defined,name-defined"
# (fabric_protos ships py.typed but no stubs for its generated _pb2 modules)
"""Build signed proposals the way Fabric's gateway clients do, and read results back.

A transaction id is the hex SHA-256 of nonce || creator (Fabric's own rule, checked by the
peer), so the id is bound to the identity that signed the proposal.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from fabric_protos.common import common_pb2
from fabric_protos.peer import (
    chaincode_pb2,
    proposal_pb2,
    proposal_response_pb2,
    transaction_pb2,
)
from google.protobuf import timestamp_pb2
from google.protobuf.message import DecodeError

from chaincode_client.fabric.identity import Identity, Signer

NONCE_BYTES = 24
MAX_ARGS = 64
# The peer's default gRPC receive limit is 100 MiB; a proposal far bigger is a caller bug.
MAX_ARG_BYTES = 4 * 1024 * 1024
# A prepared transaction comes back from the gateway; bound what we are willing to parse.
MAX_ENVELOPE_BYTES = 100 * 1024 * 1024


class ProtocolError(ValueError):
    """Bytes from the gateway did not have the shape Fabric defines."""


@dataclass(frozen=True)
class SignedProposal:
    tx_id: str
    proposal: proposal_pb2.SignedProposal


def transaction_id(nonce: bytes, creator: bytes) -> str:
    return hashlib.sha256(nonce + creator).hexdigest()


def _check_args(fn: str, args: tuple[str, ...]) -> list[bytes]:
    if not fn:
        raise ValueError("chaincode function name is empty")
    if len(args) + 1 > MAX_ARGS:
        raise ValueError(f"{len(args)} arguments: at most {MAX_ARGS - 1} are accepted")
    encoded = [fn.encode()] + [a.encode() for a in args]
    total = sum(len(b) for b in encoded)
    if total > MAX_ARG_BYTES:
        raise ValueError(f"arguments are {total} bytes, more than {MAX_ARG_BYTES}")
    return encoded


def build_proposal(
    identity: Identity,
    signer: Signer,
    channel: str,
    chaincode: str,
    fn: str,
    args: tuple[str, ...],
    nonce: bytes | None = None,
) -> SignedProposal:
    """An endorser proposal invoking `chaincode.fn(*args)` on `channel`, signed."""
    nonce = os.urandom(NONCE_BYTES) if nonce is None else nonce
    creator = identity.serialized()
    tx_id = transaction_id(nonce, creator)
    now = timestamp_pb2.Timestamp()
    now.GetCurrentTime()
    cc_id = chaincode_pb2.ChaincodeID(name=chaincode)
    channel_header = common_pb2.ChannelHeader(
        type=common_pb2.ENDORSER_TRANSACTION,
        timestamp=now,
        channel_id=channel,
        tx_id=tx_id,
        extension=proposal_pb2.ChaincodeHeaderExtension(chaincode_id=cc_id).SerializeToString(),
    )
    header = common_pb2.Header(
        channel_header=channel_header.SerializeToString(),
        signature_header=common_pb2.SignatureHeader(
            creator=creator, nonce=nonce
        ).SerializeToString(),
    )
    spec = chaincode_pb2.ChaincodeSpec(
        # The peer ignores this for lifecycle chaincode; NODE is what the official gateway
        # clients send, and tests/fabric/test_node_conformance.py holds us to their shape.
        type=chaincode_pb2.ChaincodeSpec.NODE,
        chaincode_id=cc_id,
        input=chaincode_pb2.ChaincodeInput(args=_check_args(fn, args)),
    )
    payload = proposal_pb2.ChaincodeProposalPayload(
        input=chaincode_pb2.ChaincodeInvocationSpec(chaincode_spec=spec).SerializeToString()
    )
    proposal_bytes = proposal_pb2.Proposal(
        header=header.SerializeToString(), payload=payload.SerializeToString()
    ).SerializeToString()
    signed = proposal_pb2.SignedProposal(
        proposal_bytes=proposal_bytes, signature=signer.sign(proposal_bytes)
    )
    return SignedProposal(tx_id, signed)


def _parse(cls: type, data: bytes, what: str):  # type: ignore[no-untyped-def]
    msg = cls()
    try:
        msg.ParseFromString(data)
    except DecodeError as exc:
        raise ProtocolError(f"{what}: not a valid {cls.__name__} ({exc})") from exc
    return msg


def transaction_result(envelope: common_pb2.Envelope) -> bytes:
    """The chaincode's return value inside a prepared (endorsed, unsigned) transaction."""
    if envelope.ByteSize() > MAX_ENVELOPE_BYTES:
        raise ProtocolError(f"prepared transaction larger than {MAX_ENVELOPE_BYTES} bytes")
    payload = _parse(common_pb2.Payload, envelope.payload, "envelope.payload")
    tx = _parse(transaction_pb2.Transaction, payload.data, "payload.data")
    if len(tx.actions) != 1:
        raise ProtocolError(f"transaction has {len(tx.actions)} actions, expected 1")
    action = _parse(
        transaction_pb2.ChaincodeActionPayload, tx.actions[0].payload, "actions[0].payload"
    )
    prp = _parse(
        proposal_response_pb2.ProposalResponsePayload,
        action.action.proposal_response_payload,
        "proposal_response_payload",
    )
    cc_action = _parse(proposal_pb2.ChaincodeAction, prp.extension, "response extension")
    return bytes(cc_action.response.payload)


def sign_envelope(envelope: common_pb2.Envelope, signer: Signer) -> common_pb2.Envelope:
    return common_pb2.Envelope(payload=envelope.payload, signature=signer.sign(envelope.payload))
