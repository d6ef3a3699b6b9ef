"""Export a lease's receipt from a Fabric channel: the blocks holding its transactions.

The lease's transactions are found through the contract's own queries: the history of
`lease:ID` (creation, migrations, end), its settlements, the history of every attestation it
relied on (`att:ID`), of the quote that attested each batch of readings its bill lines cite
(`attested-telemetry:GPU:DIGEST`) and of every node whose GPUs it held (`node:ID`). Each
block holding one is fetched from the peer's ledger through the `qscc` system chaincode
(`GetBlockByTxID`), raw, so `python -m ledger verify-receipt FILE --trust ROOTS.pem`
re-checks it offline with nothing but the channel's roots (`ledger.audit.fabric_receipt`).
"""

from __future__ import annotations

import base64
import json
from typing import Any, Protocol

from ledger.audit.fabric_block import BlockFormatError, envelope_tx_id, parse_block
from ledger.audit.fabric_receipt import FORMAT
from ledger.audit.receipt import cited_marks
from ledger.contract.state import ATTESTATION, LEASE, NODE

QSCC = "qscc"
QSCC_BLOCK_BY_TX = "GetBlockByTxID"


class Evaluator(Protocol):
    channel_name: str
    chaincode: str

    def evaluate(self, fn: str, *args: str) -> bytes: ...

    def evaluate_chaincode(self, chaincode: str, fn: str, *args: str) -> bytes: ...


def _query(client: Evaluator, fn: str, **request: str) -> Any:
    return json.loads(client.evaluate(fn, json.dumps(request, sort_keys=True)))


def lease_tx_ids(client: Evaluator, lease_id: str) -> list[str]:
    """Every transaction a receipt of the lease shows, in the order they are listed."""
    versions = _query(client, "GetHistory", key=LEASE + lease_id)
    if not versions:
        raise KeyError(f"lease {lease_id} is not on this channel")
    atts: set[str] = set()
    nodes: set[str] = set()
    for version in versions:
        lease = version["value"]
        if lease is None:
            continue
        atts |= set(lease["attestation_ids"])
        gpus = lease["gpus"] + [g for m in lease["migrations"] for g in m["from"]]
        nodes |= {g["node_id"] for g in gpus}
    tx_ids = [v["tx_id"] for v in versions]
    lines = _query(client, "GetSettlements", lease_id=lease_id)
    tx_ids += [s["tx_id"] for s in lines]
    keys = [ATTESTATION + a for a in sorted(atts)] + cited_marks(lines)
    for key in keys + [NODE + n for n in sorted(nodes)]:
        tx_ids += [v["tx_id"] for v in _query(client, "GetHistory", key=key)]
    return list(dict.fromkeys(tx_ids))  # a transaction that wrote two keys is listed once


def export_fabric_receipt(client: Evaluator, lease_id: str) -> dict[str, Any]:
    """The receipt of one lease (JSON-ready): channel, chaincode, the raw blocks (base64) and
    where each transaction sits in them."""
    blocks: dict[int, bytes] = {}
    entries = []
    for tx_id in lease_tx_ids(client, lease_id):
        raw = client.evaluate_chaincode(QSCC, QSCC_BLOCK_BY_TX, client.channel_name, tx_id)
        try:
            block = parse_block(raw)
            index = [envelope_tx_id(e) for e in block.envelopes].index(tx_id)
        except (BlockFormatError, ValueError) as exc:
            raise ValueError(f"block of transaction {tx_id} from the peer: {exc}") from exc
        blocks[block.number] = raw
        entries.append({"tx_id": tx_id, "block": block.number, "index": index})
    return {
        "format": FORMAT,
        "lease_id": lease_id,
        "channel": client.channel_name,
        "chaincode": client.chaincode,
        "blocks": [
            {"number": n, "block": base64.b64encode(raw).decode()}
            for n, raw in sorted(blocks.items())
        ],
        "transactions": entries,
    }
