"""What an organisation endorsed, read from its own peer's copy of the ledger (the second
organisation's read-only view, `python -m chaincode_client.fabric_network view ORG`): every
valid transaction of the Wattlease contract that carries an endorsement by that
organisation's peer, counted by contract function, with the nodes and leases they wrote.
Nothing is taken from the other organisation: blocks come from its own peer (`qscc`), and
each endorsement is named by the MSP in its signed identity.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Protocol

from fabric_protos.common import ledger_pb2
from fabric_protos.msp import identities_pb2

from ledger.audit.fabric_block import (
    VALID_CODE,
    BlockFormatError,
    parse,
    parse_block,
    parse_endorser_tx,
)
from ledger.contract.state import LEASE, NODE

QSCC = "qscc"


class Reader(Protocol):
    channel_name: str
    chaincode: str

    def evaluate_chaincode(self, chaincode: str, fn: str, *args: str) -> bytes: ...


def endorser_msp(serialized: bytes) -> str:
    identity = identities_pb2.SerializedIdentity  # type: ignore[attr-defined]
    return str(parse(identity, serialized, "endorser").mspid)


def endorsed(client: Reader, msp_id: str) -> dict[str, Any]:
    """`msp_id`'s endorsements on the channel, as its own peer holds them."""
    info = parse(
        ledger_pb2.BlockchainInfo,  # type: ignore[attr-defined]
        client.evaluate_chaincode(QSCC, "GetChainInfo", client.channel_name),
        "chain info",
    )
    functions: Counter[str] = Counter()
    nodes: set[str] = set()
    leases: set[str] = set()
    for number in range(int(info.height)):
        raw = client.evaluate_chaincode(QSCC, "GetBlockByNumber", client.channel_name, str(number))
        block = parse_block(raw)
        for envelope, code in zip(block.envelopes, block.validation_codes, strict=True):
            if code != VALID_CODE:
                continue
            try:
                tx = parse_endorser_tx(envelope)
            except BlockFormatError:  # the channel's configuration blocks
                continue
            if tx.chaincode != client.chaincode:
                continue
            if msp_id not in {endorser_msp(e.endorser) for e in tx.endorsements}:
                continue
            functions[tx.fn] += 1
            nodes |= {k.removeprefix(NODE) for k in tx.writes if k.startswith(NODE)}
            leases |= {k.removeprefix(LEASE) for k in tx.writes if k.startswith(LEASE)}
    return {
        "organisation": msp_id,
        "channel": client.channel_name,
        "chaincode": client.chaincode,
        "height": int(info.height),
        "endorsed": dict(sorted(functions.items())),
        "nodes": sorted(nodes),
        "leases": sorted(leases),
    }
