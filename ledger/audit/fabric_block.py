# mypy: disable-error-code="attr-defined,name-defined"
# (fabric_protos ships py.typed but no stubs for its generated _pb2 modules)
"""Bounded parsing of Fabric blocks and endorser transactions from untrusted bytes.

Everything here reads bytes a receipt carries, so every message is size-checked before it is
parsed and every failure becomes `BlockFormatError` naming the field: a verifier built on it
reports a defect, it never crashes. Only Fabric's wire format (`hyperledger-fabric-protos`) is
used; what the bytes *mean* is checked in `ledger.audit.fabric_receipt`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from fabric_protos.common import common_pb2
from fabric_protos.ledger.rwset import rwset_pb2
from fabric_protos.ledger.rwset.kvrwset import kv_rwset_pb2
from fabric_protos.peer import (
    chaincode_pb2,
    proposal_pb2,
    proposal_response_pb2,
    transaction_pb2,
)
from google.protobuf.message import DecodeError, Message

from ledger.units import NS_PER_S

MAX_BLOCK_BYTES = 100 * 1024 * 1024  # a peer's default gRPC message limit
MAX_TXS_PER_BLOCK = 100_000
MAX_ENDORSEMENTS = 64
MAX_ARGS = 64
SIGNATURES = common_pb2.BlockMetadataIndex.Value("SIGNATURES")
TRANSACTIONS_FILTER = common_pb2.BlockMetadataIndex.Value("TRANSACTIONS_FILTER")
VALID_CODE = transaction_pb2.TxValidationCode.Value("VALID")


class BlockFormatError(ValueError):
    """Bytes that do not have the shape Fabric defines; the message names the field."""


def parse(cls: type[Message], data: bytes, what: str) -> Message:
    """`cls` parsed from `data`, or BlockFormatError naming `what`."""
    if not isinstance(data, bytes | bytearray):
        raise BlockFormatError(f"{what}: expected bytes, got {type(data).__name__}")
    if len(data) > MAX_BLOCK_BYTES:
        raise BlockFormatError(f"{what}: {len(data)} bytes, more than {MAX_BLOCK_BYTES}")
    msg = cls()
    try:
        msg.ParseFromString(bytes(data))
    except (DecodeError, RecursionError, UnicodeDecodeError, ValueError) as exc:
        raise BlockFormatError(f"{what}: not a valid {cls.__name__} ({exc})") from None
    return msg


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _der(tag: int, body: bytes) -> bytes:
    return bytes([tag]) + _der_length(len(body)) + body


def header_bytes(number: int, previous_hash: bytes, data_hash: bytes) -> bytes:
    """ASN.1 DER of SEQUENCE {INTEGER number, OCTET STRING previous, OCTET STRING data}: what
    Fabric hashes for a block's hash and what the orderer's block signature covers."""
    length = max(1, (number.bit_length() + 8) // 8)  # a leading 0 bit: DER integers are signed
    integer = _der(0x02, number.to_bytes(length, "big"))
    return _der(0x30, integer + _der(0x04, previous_hash) + _der(0x04, data_hash))


@dataclass(frozen=True)
class BlockSignature:
    creator: bytes  # serialized msp.SerializedIdentity of the orderer
    signed: bytes  # metadata value || signature header || header DER
    signature: bytes


@dataclass(frozen=True)
class Block:
    number: int
    previous_hash: bytes
    data_hash: bytes
    envelopes: list[bytes]
    signatures: list[BlockSignature]
    validation_codes: bytes  # TRANSACTIONS_FILTER: one code per envelope

    @property
    def computed_data_hash(self) -> bytes:
        """Fabric 2.x: SHA-256 over the envelopes' bytes concatenated."""
        return hashlib.sha256(b"".join(self.envelopes)).digest()

    @property
    def hash(self) -> bytes:
        return hashlib.sha256(
            header_bytes(self.number, self.previous_hash, self.data_hash)
        ).digest()


def parse_block(raw: bytes) -> Block:
    block = parse(common_pb2.Block, raw, "block")
    if not block.HasField("header") or not block.HasField("data"):
        raise BlockFormatError("block: header or data missing")
    envelopes = [bytes(e) for e in block.data.data]
    if len(envelopes) > MAX_TXS_PER_BLOCK:
        raise BlockFormatError(f"block: {len(envelopes)} transactions, limit {MAX_TXS_PER_BLOCK}")
    metadata = list(block.metadata.metadata)
    if len(metadata) <= TRANSACTIONS_FILTER:
        raise BlockFormatError(f"block metadata: {len(metadata)} entries, no TRANSACTIONS_FILTER")
    header = block.header
    der = header_bytes(header.number, header.previous_hash, header.data_hash)
    signed = parse(common_pb2.Metadata, metadata[SIGNATURES], "block metadata SIGNATURES")
    signatures = []
    for i, sig in enumerate(signed.signatures):
        sig_header = parse(
            common_pb2.SignatureHeader, sig.signature_header, f"block signature {i} header"
        )
        signatures.append(
            BlockSignature(
                creator=bytes(sig_header.creator),
                signed=bytes(signed.value) + bytes(sig.signature_header) + der,
                signature=bytes(sig.signature),
            )
        )
    return Block(
        number=int(header.number),
        previous_hash=bytes(header.previous_hash),
        data_hash=bytes(header.data_hash),
        envelopes=envelopes,
        signatures=signatures,
        validation_codes=bytes(metadata[TRANSACTIONS_FILTER]),
    )


@dataclass(frozen=True)
class Endorsement:
    endorser: bytes  # serialized msp.SerializedIdentity
    signature: bytes  # over proposal_response_payload || endorser


@dataclass(frozen=True)
class EndorserTx:
    """One endorser transaction as it sits in a block, every field the verifier checks."""

    tx_id: str
    tx_type: int
    channel: str
    chaincode: str  # named by the proposal's header extension
    timestamp_ns: int
    creator: bytes
    nonce: bytes
    payload: bytes  # the envelope's payload: what the creator signed
    signature: bytes
    proposal_hash: bytes  # from the endorsed response payload
    computed_proposal_hash: bytes  # channel header || signature header || proposal payload
    response_payload: bytes  # proposal_response_payload: what each endorser signed over
    endorsements: list[Endorsement]
    action_chaincode: str  # named by the endorsers' ChaincodeAction
    fn: str
    args: list[bytes]
    status: int
    result: bytes  # the chaincode's return value
    writes: dict[str, bytes | None]  # the contract's namespace: key -> value (None: deleted)
    # the contract's namespace: key -> the (block, tx) version read (None: the key was absent)
    reads: dict[str, tuple[int, int] | None] = field(default_factory=dict)


def envelope_tx_id(raw: bytes) -> str:
    """The transaction id an envelope's channel header claims (no check made)."""
    env = parse(common_pb2.Envelope, raw, "envelope")
    payload = parse(common_pb2.Payload, env.payload, "envelope.payload")
    header = parse(common_pb2.ChannelHeader, payload.header.channel_header, "channel_header")
    return str(header.tx_id)


def parse_endorser_tx(raw: bytes) -> EndorserTx:
    env = parse(common_pb2.Envelope, raw, "envelope")
    payload = parse(common_pb2.Payload, env.payload, "envelope.payload")
    ch_bytes = bytes(payload.header.channel_header)
    sh_bytes = bytes(payload.header.signature_header)
    ch = parse(common_pb2.ChannelHeader, ch_bytes, "channel_header")
    sh = parse(common_pb2.SignatureHeader, sh_bytes, "signature_header")
    ext = parse(proposal_pb2.ChaincodeHeaderExtension, ch.extension, "channel_header.extension")
    tx = parse(transaction_pb2.Transaction, payload.data, "payload.data")
    if len(tx.actions) != 1:
        raise BlockFormatError(f"transaction: {len(tx.actions)} actions, expected 1")
    cap = parse(transaction_pb2.ChaincodeActionPayload, tx.actions[0].payload, "actions[0].payload")
    ccpp_bytes = bytes(cap.chaincode_proposal_payload)
    ccpp = parse(proposal_pb2.ChaincodeProposalPayload, ccpp_bytes, "chaincode_proposal_payload")
    spec = parse(chaincode_pb2.ChaincodeInvocationSpec, ccpp.input, "proposal input")
    args = [bytes(a) for a in spec.chaincode_spec.input.args]
    if not args or len(args) > MAX_ARGS:
        raise BlockFormatError(f"proposal input: {len(args)} arguments, expected 1..{MAX_ARGS}")
    prp_bytes = bytes(cap.action.proposal_response_payload)
    prp = parse(
        proposal_response_pb2.ProposalResponsePayload, prp_bytes, "proposal_response_payload"
    )
    action = parse(proposal_pb2.ChaincodeAction, prp.extension, "proposal response extension")
    endorsements = list(cap.action.endorsements)
    if len(endorsements) > MAX_ENDORSEMENTS:
        raise BlockFormatError(f"{len(endorsements)} endorsements, limit {MAX_ENDORSEMENTS}")
    try:
        fn = args[0].decode()
    except UnicodeDecodeError:
        raise BlockFormatError("proposal input: function name is not UTF-8") from None
    return EndorserTx(
        tx_id=str(ch.tx_id),
        tx_type=int(ch.type),
        channel=str(ch.channel_id),
        chaincode=str(ext.chaincode_id.name),
        timestamp_ns=int(ch.timestamp.seconds) * NS_PER_S + int(ch.timestamp.nanos),
        creator=bytes(sh.creator),
        nonce=bytes(sh.nonce),
        payload=bytes(env.payload),
        signature=bytes(env.signature),
        proposal_hash=bytes(prp.proposal_hash),
        computed_proposal_hash=hashlib.sha256(ch_bytes + sh_bytes + ccpp_bytes).digest(),
        response_payload=prp_bytes,
        endorsements=[Endorsement(bytes(e.endorser), bytes(e.signature)) for e in endorsements],
        action_chaincode=str(action.chaincode_id.name),
        fn=fn,
        args=args[1:],
        status=int(action.response.status),
        result=bytes(action.response.payload),
        **_rwset(bytes(action.results), str(action.chaincode_id.name)),
    )


def _rwset(results: bytes, namespace: str) -> dict[str, Any]:
    """The keys a transaction read (at which version) and wrote in `namespace` (its
    read-write set, as endorsed): EndorserTx's `reads` and `writes`."""
    rwset = parse(rwset_pb2.TxReadWriteSet, results, "chaincode action results")
    writes: dict[str, bytes | None] = {}
    reads: dict[str, tuple[int, int] | None] = {}
    for ns in rwset.ns_rwset:
        if ns.namespace != namespace:
            continue
        kv = parse(kv_rwset_pb2.KVRWSet, ns.rwset, f"rwset of {namespace}")
        for read in kv.reads:
            found = read.HasField("version")
            reads[str(read.key)] = (
                (int(read.version.block_num), int(read.version.tx_num)) if found else None
            )
        for write in kv.writes:
            writes[str(write.key)] = None if write.is_delete else bytes(write.value)
    return {"reads": reads, "writes": writes}
