# mypy: disable-error-code="attr-defined,name-defined"
# (fabric_protos ships py.typed but no stubs for its generated _pb2 modules)
"""Turn the gateway's gRPC errors into the ledger client's typed errors.

The gateway puts one `gateway.ErrorDetail` per peer or orderer (address, MSP id, message) in
the gRPC status details (`grpc-status-details-bin`, a google.rpc.Status). We decode that
with a private descriptor pool instead of depending on googleapis-common-protos, and bound
what we accept: the trailer comes from the network.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from fabric_protos.gateway import gateway_pb2
from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from chaincode_client.interface import (
    REASON_CREATOR,
    EndorsementError,
    LedgerError,
    LedgerUnavailable,
    PeersBehind,
)

STATUS_DETAILS_KEY = "grpc-status-details-bin"
MAX_STATUS_DETAILS_BYTES = 1024 * 1024
MAX_DETAILS = 64
MAX_MESSAGE_CHARS = 2000
ERROR_DETAIL_TYPE = "type.googleapis.com/gateway.ErrorDetail"

# The ledger could not be reached or gave up: the outcome is unknown, the caller retries.
TRANSIENT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.CANCELLED,
    }
)
# The orderer refused the transaction itself (bad signature, creator not allowed by the
# channel's Writers policy): sending it again cannot succeed.
PERMANENT_SUBMIT_CODES = frozenset(
    {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED}
)
# Peer messages that mean "the chaincode is not running or not reachable yet" rather than
# "the contract refused": these endorsement failures go away by themselves, so they are
# reported as LedgerUnavailable (retry) rather than EndorsementError (do not retry).
CHAINCODE_NOT_READY_MARKERS = (
    "could not launch chaincode",
    "connection to chaincode",
    "chaincode registration failed",
    "error sending",
    "timeout expired while executing transaction",
    "connection refused",
    "chaincode stream terminated",
)
# Peer messages that mean "an endorsing peer could not be reached, or is not known yet":
# a peer stopping mid-endorsement (its connection closing), a peer down, or discovery not
# yet having learnt another organisation's peer after a start. Nothing was ordered, and the
# same proposal succeeds once the peer is back.
PEER_UNREACHABLE_MARKERS = (
    "the client connection is closing",
    "code = unavailable",
    "code = canceled",
    "error reading from server: eof",
    "failed to create new connection",
    "no combination of peers can be derived",
    "no peer combination can satisfy",
)
# The gateway's words for a creator the channel does not accept.
CREATOR_REJECTED_MARKERS = ("access denied", "creator org unknown", "creator certificate")
# The endorsing peers simulated different results, typically because a block had reached one
# peer and not yet the other: nothing was ordered, and a new proposal can succeed.
PEERS_DISAGREE_MARKERS = ("proposalresponsepayloads do not match",)
PEERS_BEHIND_PREFIX = "another organisation's peer is behind"


def _status_class() -> type:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(any_pb2.DESCRIPTOR.serialized_pb)
    fdp = descriptor_pb2.FileDescriptorProto(
        name="wattlease/google_rpc_status.proto",
        package="google.rpc",
        syntax="proto3",
        dependency=["google/protobuf/any.proto"],
    )
    msg = fdp.message_type.add(name="Status")
    fd = descriptor_pb2.FieldDescriptorProto
    msg.field.add(name="code", number=1, type=fd.TYPE_INT32, label=fd.LABEL_OPTIONAL)
    msg.field.add(name="message", number=2, type=fd.TYPE_STRING, label=fd.LABEL_OPTIONAL)
    msg.field.add(
        name="details",
        number=3,
        type=fd.TYPE_MESSAGE,
        label=fd.LABEL_REPEATED,
        type_name=".google.protobuf.Any",
    )
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("google.rpc.Status"))


_Status = _status_class()


@dataclass(frozen=True)
class PeerError:
    address: str
    msp_id: str
    message: str

    def __str__(self) -> str:
        return f"{self.msp_id or '?'}@{self.address or '?'}: {self.message}"


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + "…"


def parse_status_details(data: bytes) -> list[PeerError]:
    """Decode a google.rpc.Status trailer into the gateway's per-peer errors. Bytes that are
    not a Status, or details of other types, yield nothing rather than an exception: the
    error being reported matters more than a malformed trailer."""
    if len(data) > MAX_STATUS_DETAILS_BYTES:
        return [PeerError("", "", f"status details of {len(data)} bytes were not decoded")]
    status = _Status()
    try:
        status.ParseFromString(data)
    except DecodeError:
        return []
    found: list[PeerError] = []
    for any_msg in list(status.details)[:MAX_DETAILS]:
        if any_msg.type_url != ERROR_DETAIL_TYPE:
            continue
        detail = gateway_pb2.ErrorDetail()
        try:
            detail.ParseFromString(any_msg.value)
        except DecodeError:
            continue
        found.append(PeerError(_clip(detail.address), _clip(detail.msp_id), _clip(detail.message)))
    return found


def peer_errors(err: grpc.RpcError) -> list[PeerError]:
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    for key, value in trailers or ():
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            return parse_status_details(value)
    return []


def describe(
    step: str, code: grpc.StatusCode | None, message: str, details: list[PeerError]
) -> str:
    name = code.name if code is not None else "UNKNOWN"
    text = f"{step} failed ({name}): {_clip(message)}"
    if details:
        text += "; " + "; ".join(str(d) for d in details)
    return text


def peers_disagree(err: grpc.RpcError, own_msp: str | None = None) -> bool:
    """The endorsing peers simulated different results: the gateway said so (see
    PEERS_DISAGREE_MARKERS), or only other organisations' peers refused. The gateway
    endorses on its own organisation's peer first and stops there if that one refuses; so a
    refusal from other organisations alone means the client's own peer accepted: typically
    a block (the client's previous commit) that has reached its own peer and not yet theirs.
    Nothing was ordered; a proposal a moment later normally agrees."""
    message = err.details() if hasattr(err, "details") else str(err)
    details = peer_errors(err)
    text = " ".join([message or ""] + [d.message for d in details]).lower()
    if any(m in text for m in PEERS_DISAGREE_MARKERS):
        return True
    return bool(
        own_msp
        and details
        and all(d.msp_id and d.msp_id != own_msp for d in details)
        and "endorsements" in (message or "")
    )


def to_ledger_error(step: str, err: grpc.RpcError, own_msp: str | None = None) -> LedgerError:
    """The typed error for a failed gateway call. `step` is evaluate, endorse, submit,
    commit_status or events; the peers' messages are in the text and in `.peer_errors`."""
    code = err.code() if hasattr(err, "code") else None
    message = err.details() if hasattr(err, "details") else str(err)
    details = peer_errors(err)
    text = describe(step, code, message or "", details)
    exc: LedgerError
    all_messages = " ".join([message or ""] + [d.message for d in details]).lower()
    if code in TRANSIENT_CODES or step in ("commit_status", "events"):
        exc = LedgerUnavailable(text)
    elif step == "submit" and code not in PERMANENT_SUBMIT_CODES:
        # Not ordered (orderer down, no leader yet): nothing was committed, resubmitting the
        # same business key is safe because the contract is idempotent.
        exc = LedgerUnavailable(text)
    elif any(m in all_messages for m in CHAINCODE_NOT_READY_MARKERS + PEER_UNREACHABLE_MARKERS):
        exc = LedgerUnavailable(text)
    elif peers_disagree(err, own_msp):
        exc = PeersBehind(f"{PEERS_BEHIND_PREFIX}: {text}")
    elif any(m in all_messages for m in CREATOR_REJECTED_MARKERS):
        exc = EndorsementError(text, reason=REASON_CREATOR)
    else:
        exc = EndorsementError(text)
    # Extra context for callers that want it; the interface's exception classes are fixed.
    setattr(exc, "peer_errors", details)  # noqa: B010
    setattr(exc, "grpc_code", code)  # noqa: B010
    return exc
