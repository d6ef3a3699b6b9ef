"""Re-check a lease's receipt from a Fabric channel offline, against roots the auditor names.

A Fabric receipt (`"format": "fabric/1"`, exported by `chaincode_client.fabric.receipts`)
holds the raw blocks that contain the lease's transactions: its creation, migrations and end,
its settlements, the attestations it relied on and its nodes' registrations. For each block
the verifier recomputes the data hash and checks an orderer's signature over the header; for
each transaction, its validation code, the creator's signature, the transaction id, the
proposal hash, every endorsement's signature and the endorsement policy (a peer of every
organisation), all against the trust roots given, never against anything in the receipt.
The block's validation code (TRANSACTIONS_FILTER metadata) is signed by no orderer, so a
VALID there is only a claim: the read versions the endorsers signed must also show the
transaction read the lease's current state (ledger.audit.validity).
Then the contract-level facts: every transaction is about this lease (or an attestation or
node it relied on), each settlement line is re-derived from the lease terms its transaction
wrote (as for embedded receipts), and nothing the lease relied on is missing.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ledger.audit.fabric_block import (
    MAX_BLOCK_BYTES,
    VALID_CODE,
    Block,
    BlockFormatError,
    EndorserTx,
    parse_block,
    parse_endorser_tx,
)
from ledger.audit.fabric_trust import (
    IdentityDefect,
    RootsError,
    TrustRoots,
    check_signature,
    identity,
    parse_roots,
)
from ledger.audit.receipt import (
    ReceiptTx,
    attested_by,
    check_settlement,
    cited_marks,
    written_lines,
)
from ledger.audit.validity import ChainTx, chain_defects

FORMAT = "fabric/1"
ENDORSER_TRANSACTION = 3  # common.HeaderType
PEER_ERROR_THRESHOLD = 400
PEER_ROLE = "peer"
MAX_RECEIPT_BLOCKS = 10_000
LEASE_FNS = ("CreateLease", "MigrateLease", "EndLease")
NODE_FNS = ("RegisterNode", "RevokeAK")


class ReceiptFormatError(ValueError):
    """The receipt's JSON does not have the fabric/1 shape; the message names the field."""


@dataclass(frozen=True)
class TxRef:
    tx_id: str
    block: int
    index: int


def verify_fabric_receipt(receipt: Any, roots_pem: bytes) -> list[str]:
    """Defects found in the receipt; an empty list means every check passed."""
    try:
        roots = parse_roots(roots_pem)
    except RootsError as exc:
        return [str(exc)]
    return check_fabric_receipt(receipt, roots)


def check_fabric_receipt(receipt: Any, roots: TrustRoots) -> list[str]:
    """`verify_fabric_receipt` with the roots parsed once (an auditor checks many receipts)."""
    try:
        return _verify(receipt, roots)
    except ReceiptFormatError as exc:
        return [f"receipt is malformed: {exc}"]


def fabric_receipt_txs(receipt: dict[str, Any]) -> dict[str, ReceiptTx]:
    """Every transaction of a Fabric receipt that `check_fabric_receipt` passed, by id: its
    function, whether its block marks it VALID, what it wrote as endorsed, where it is."""
    blocks = {n: parse_block(raw) for n, raw in _blocks(receipt).items()}
    out = {}
    for ref in _refs(receipt):
        block = blocks[ref.block]
        tx = parse_endorser_tx(block.envelopes[ref.index])
        valid = block.validation_codes[ref.index] == VALID_CODE
        fn = tx.fn.rsplit(":", 1)[-1]
        out[ref.tx_id] = ReceiptTx(fn, valid, tx.writes, (ref.block, ref.index))
    return out


def _field(obj: Any, name: str, kind: type) -> Any:
    if not isinstance(obj, dict) or name not in obj:
        raise ReceiptFormatError(f"{name}: missing")
    value = obj[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ReceiptFormatError(f"{name}: expected {kind.__name__}")
    return value


def _blocks(receipt: dict[str, Any]) -> dict[int, bytes]:
    entries = _field(receipt, "blocks", list)
    if len(entries) > MAX_RECEIPT_BLOCKS:
        raise ReceiptFormatError(f"blocks: {len(entries)} entries, limit {MAX_RECEIPT_BLOCKS}")
    blocks = {}
    for entry in entries:
        text = _field(entry, "block", str)
        if len(text) > MAX_BLOCK_BYTES * 4 // 3 + 4:
            raise ReceiptFormatError(f"blocks: a block over {MAX_BLOCK_BYTES} bytes")
        try:
            blocks[_field(entry, "number", int)] = base64.b64decode(text, validate=True)
        except ValueError:  # binascii.Error, or a non-ASCII string
            raise ReceiptFormatError("blocks: a block is not base64") from None
    return blocks


def _refs(receipt: dict[str, Any]) -> list[TxRef]:
    return [
        TxRef(_field(e, "tx_id", str), _field(e, "block", int), _field(e, "index", int))
        for e in _field(receipt, "transactions", list)
    ]


def _verify(receipt: Any, roots: TrustRoots) -> list[str]:
    if _field(receipt, "format", str) != FORMAT:
        raise ReceiptFormatError(f"format: expected {FORMAT!r}")
    channel, chaincode = _field(receipt, "channel", str), _field(receipt, "chaincode", str)
    facts = _Facts(_field(receipt, "lease_id", str))
    defects: list[str] = []
    if roots.channel is not None and channel != roots.channel:
        defects.append(f"channel {channel!r} is not the channel the trust roots name")
    if roots.chaincode is not None and chaincode != roots.chaincode:
        defects.append(f"chaincode {chaincode!r} is not the chaincode the trust roots name")
    blocks: dict[int, Block] = {}
    for number, raw in _blocks(receipt).items():
        try:
            blocks[number] = parse_block(raw)
        except BlockFormatError as exc:
            defects.append(f"block {number}: {exc}")
            continue
        defects += [f"block {number}: {d}" for d in _check_block(number, blocks[number], roots)]
    chain = []
    for ref in _refs(receipt):
        where = f"block {ref.block} tx {ref.index} ({ref.tx_id})"
        block = blocks.get(ref.block)
        if block is None:
            defects.append(f"{where}: its block is not in the receipt or unreadable")
            continue
        problems, tx = _check_entry(ref, block, channel, chaincode, roots, facts)
        defects += [f"{where}: {p}" for p in problems]
        if tx is not None:
            chain.append(ChainTx(tx.tx_id, (ref.block, ref.index), tx.reads, tx.writes))
    # the filter says VALID; whether it was is what the endorsed read versions show
    return defects + facts.missing() + chain_defects(chain, facts.lease_id)


def _check_block(number: int, block: Block, roots: TrustRoots) -> list[str]:
    defects = []
    if block.number != number:
        defects.append(f"header says block {block.number}")
    if block.computed_data_hash != block.data_hash:
        defects.append("data hash does not match the block's transactions")
    reasons = []
    for sig in block.signatures:
        try:
            signer = identity(sig.creator, roots.orderers)
            check_signature(signer, sig.signed, sig.signature, "block signature")
            return defects
        except IdentityDefect as exc:
            reasons.append(str(exc))
    return [*defects, f"no valid orderer signature ({'; '.join(reasons) or 'none'})"]


def _check_entry(
    ref: TxRef, block: Block, channel: str, chaincode: str, roots: TrustRoots, facts: _Facts
) -> tuple[list[str], EndorserTx | None]:
    """The entry's defects, and its transaction when the block claims it VALID."""
    if not 0 <= ref.index < len(block.envelopes):
        return [f"index {ref.index} outside the block's {len(block.envelopes)} transactions"], None
    codes = block.validation_codes
    if ref.index >= len(codes) or codes[ref.index] != VALID_CODE:
        return ["the block does not mark this transaction VALID"], None
    try:
        tx = parse_endorser_tx(block.envelopes[ref.index])
    except BlockFormatError as exc:
        return [str(exc)], None
    if tx.tx_id != ref.tx_id:
        return [f"the envelope holds transaction {tx.tx_id}"], None
    problems = _check_tx(tx, channel, chaincode, roots)
    return problems + facts.add(tx), tx


def _check_tx(tx: EndorserTx, channel: str, chaincode: str, roots: TrustRoots) -> list[str]:
    problems = []
    if tx.tx_type != ENDORSER_TRANSACTION:
        problems.append(f"header type {tx.tx_type} is not an endorser transaction")
    if hashlib.sha256(tx.nonce + tx.creator).hexdigest() != tx.tx_id:
        problems.append("tx id is not sha256(nonce || creator)")
    if tx.channel != channel:
        problems.append(f"channel {tx.channel!r}, not {channel!r}")
    if tx.chaincode != chaincode or tx.action_chaincode != chaincode:
        problems.append(f"chaincode {tx.chaincode!r}/{tx.action_chaincode!r}, not {chaincode!r}")
    if tx.proposal_hash != tx.computed_proposal_hash:
        problems.append("endorsed proposal hash does not match the proposal (header or args)")
    if tx.status >= PEER_ERROR_THRESHOLD:
        problems.append(f"chaincode response status {tx.status}")
    try:
        creator = identity(tx.creator, roots.orgs, tx.timestamp_ns)
        check_signature(creator, tx.payload, tx.signature, "creator signature")
    except IdentityDefect as exc:
        problems.append(str(exc))
    return problems + _check_endorsements(tx, roots)


def _check_endorsements(tx: EndorserTx, roots: TrustRoots) -> list[str]:
    problems, endorsed = [], set()
    for i, endorsement in enumerate(tx.endorsements):
        try:
            peer = identity(endorsement.endorser, roots.orgs, tx.timestamp_ns)
            if PEER_ROLE not in peer.roles:
                raise IdentityDefect(f"endorser {i} of {peer.msp_id} is not a peer")
            data = tx.response_payload + endorsement.endorser
            check_signature(peer, data, endorsement.signature, f"endorsement {i}")
            endorsed.add(peer.msp_id)
        except IdentityDefect as exc:
            problems.append(str(exc))
    missing = sorted(set(roots.orgs) - endorsed)
    if missing:
        policy = ", ".join(f"{m}.{PEER_ROLE}" for m in sorted(roots.orgs))
        problems.append(
            f"endorsement policy AND({policy}) not met: no valid endorsement by "
            + ", ".join(f"{m}.{PEER_ROLE}" for m in missing)
        )
    return problems


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise ReceiptFormatError(f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise ReceiptFormatError(f"{what} is not a JSON object")
    return value


@dataclass
class _Facts:
    """What the lease's transactions say, gathered to check the receipt is about the lease and
    complete: every attestation and node it relied on shown, nothing unrelated (an
    attestation is related when the lease relied on it or its quote bound readings a line of
    the lease cites)."""

    lease_id: str
    created: bool = False
    needed_atts: set[str] = field(default_factory=set)
    needed_nodes: set[str] = field(default_factory=set)
    atts: dict[str, bool] = field(default_factory=dict)  # id -> valid verdict
    nodes: set[str] = field(default_factory=set)
    lease_txs: set[str] = field(default_factory=set)  # CreateLease/MigrateLease tx ids shown
    named_txs: set[str] = field(default_factory=set)  # ... and those the lease records name
    cited: set[str] = field(default_factory=set)  # attested-telemetry keys its lines cite
    marked: dict[str, set[str]] = field(default_factory=dict)  # attestation -> keys it wrote

    def add(self, tx: EndorserTx) -> list[str]:
        fn = tx.fn.rsplit(":", 1)[-1]  # a contract-qualified name, `wattlease:Settle`
        try:
            if len(tx.args) != 1:
                raise ReceiptFormatError(f"{len(tx.args)} arguments, expected 1")
            req = _json_object(tx.args[0], "the request")
            result = _json_object(tx.result, "the response")
            return self._add(fn, tx.tx_id, req, result, tx.writes)
        except (ReceiptFormatError, KeyError, TypeError, ValueError, AttributeError) as exc:
            return [f"{fn}: not shaped as the contract writes it ({type(exc).__name__}: {exc})"]

    def _add(
        self,
        fn: str,
        tx_id: str,
        req: dict[str, Any],
        result: dict[str, Any],
        writes: dict[str, bytes | None],
    ) -> list[str]:
        about_lease = fn in LEASE_FNS or fn == "Settle"
        if about_lease and {req["lease_id"], result["lease_id"]} != {self.lease_id}:
            return [f"{fn} is about lease {req['lease_id']!r}, not {self.lease_id!r}"]
        if fn in LEASE_FNS:
            # the endorsers read the lease record to answer: the creation and migrations it
            # names were committed, so they must be the ones this receipt shows
            self.created |= fn == "CreateLease"
            if fn != "EndLease":
                self.lease_txs.add(tx_id)
            self.named_txs |= {result["created_tx"]} | {m["tx_id"] for m in result["migrations"]}
            self.needed_atts |= set(result["attestation_ids"])
            gpus = list(result["gpus"]) + [g for m in result["migrations"] for g in m["from"]]
            self.needed_nodes |= {g["node_id"] for g in gpus}
        elif fn == "Settle":
            # the line re-derived from the lease terms the transaction wrote beside it, as
            # for the embedded ledger's receipts
            self.cited |= set(cited_marks(written_lines(writes)))
            return check_settlement(f"Settle {tx_id[:12]}", writes)
        elif fn == "RecordAttestation":
            if result["attestation_id"] != tx_id:
                return [f"attestation id {result['attestation_id']!r} is not its tx id"]
            self.atts[tx_id] = result["valid"] is True
            self.marked[tx_id] = attested_by(tx_id, writes)
        elif fn in NODE_FNS:
            self.nodes.add(req["node_id"])
        else:
            return [f"{fn} is not a ledger write a lease's receipt holds"]
        return []

    def missing(self) -> list[str]:
        defects = [] if self.created else [f"no CreateLease of lease {self.lease_id}"]
        for att in sorted(self.needed_atts):
            if att not in self.atts:
                defects.append(f"attestation {att} the lease relied on is not in the receipt")
            elif not self.atts[att]:
                defects.append(f"attestation {att} the lease relied on has an invalid verdict")
        for att in sorted(set(self.atts) - self.needed_atts):
            if not self.marked.get(att, set()) & self.cited:
                defects.append(
                    f"attestation {att} is in the receipt but the lease neither relied on it "
                    "nor cites readings it attested"
                )
        for node in sorted(self.needed_nodes - self.nodes):
            defects.append(f"the registration of node {node} is not in the receipt")
        for node in sorted(self.nodes - self.needed_nodes):
            defects.append(f"node {node} is in the receipt but the lease never used it")
        for tx_id in sorted(self.named_txs ^ self.lease_txs):
            defects.append(
                f"transaction {tx_id}: the lease's records and the receipt's CreateLease/"
                "MigrateLease transactions disagree on it"
            )
        return defects
