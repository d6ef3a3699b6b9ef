"""Per-lease receipts a tenant can re-check offline, without the ledger.

A receipt holds the channel configuration (organisations' CA certificates, endorsement
policy), every block header of the chain, and for each transaction of the lease (its
creation, migrations, end, settlements, the attestations it relied on, the challenges they
answered and its nodes' registrations) the raw envelope, its position and the hashes of its
block's other envelopes. `verify_receipt` recomputes the hash chain, each block's data hash,
the creator and endorsement signatures against the policy, every settlement amount and which
transactions were valid (the read versions of the lease's keys form one chain:
ledger.audit.validity; the `code` an entry carries is hashed by nothing) — all
under the organisation CAs the checker trusts, given from outside (`load_roots`): a receipt's
own channel configuration proves nothing, as anyone can make up a channel.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attest.files import read_bounded
from ledger import money
from ledger.audit.chain import _Chain
from ledger.audit.validity import ChainTx, chain_defects
from ledger.contract import bill_line, billing
from ledger.contract.attested_telemetry import mark_key
from ledger.contract.state import (
    ATTESTATION,
    ATTESTED_TELEMETRY,
    CHALLENGE,
    LEASE,
    NODE,
    ContractError,
    settlements_prefix,
)
from ledger.engine.msp import ChannelMsp
from ledger.engine.tx import (
    VALID,
    EndorsementPolicy,
    block_header_hash,
    check_signatures,
    decode_envelope,
)
from ledger.genesis import GENESIS_PREVIOUS_HASH, check_roots, read_config

RECEIPT_VERSION = 1
MAX_RECEIPT_BYTES = 64 * 1024 * 1024


def export_receipt(path: Path, lease_id: str) -> dict[str, Any]:
    """The receipt of one lease. Its transactions are found through the key-history index:
    those that wrote the lease (creation, migrations, end; the only ones that claim or free
    its GPUs), its settlements, the attestations it relied on, the quotes that attested the
    readings its bill lines cite, and its nodes' registrations."""
    chain = _Chain(path)
    if chain.value(LEASE + lease_id) is None:
        raise KeyError(f"lease {lease_id} is not on this ledger")
    # every version of the lease: a migration replaces its GPUs and the attestations relied
    # on, and the receipt must still show what the earlier placement rested on
    atts: set[str] = set()
    nodes: set[str] = set()
    for version in chain.versions(LEASE + lease_id):
        lease = json.loads(version)
        atts |= set(lease["attestation_ids"])
        nodes |= {g["node_id"] for g in lease["gpus"]}
    settlements = settlements_prefix(lease_id)
    keys = [LEASE + lease_id]
    keys += [ATTESTATION + att for att in sorted(atts)]
    keys += cited_marks(json.loads(line) for line in chain.values(settlements))
    # the challenge each attestation answered: its issue time is the attestation's age
    keys += [CHALLENGE + _nonce_of(chain, att) for att in sorted(atts)]
    keys += [NODE + node for node in sorted(nodes)]
    wanted = chain.writers(keys, prefix=settlements)
    blocks = {block for block, _ in wanted}
    headers, entries = [], []
    for number, prev_hash, data_hash, block_hash, _ in chain.blocks():
        headers.append(
            {
                "number": number,
                "previous_hash": prev_hash,
                "data_hash": data_hash,
                "hash": block_hash,
            }
        )
        if number not in blocks:
            continue
        txs = chain.block_txs(number)
        hashes = [hashlib.sha256(bytes(e)).hexdigest() for _, _, _, e in txs]
        for txnum, tx_id, code, envelope in txs:
            if code == VALID and (number, txnum) in wanted:
                entries.append(
                    {
                        "block": number,
                        "txnum": txnum,
                        "tx_id": tx_id,
                        "code": code,
                        "envelope": bytes(envelope).decode(),
                        "block_tx_hashes": hashes,
                    }
                )
    return {
        "version": RECEIPT_VERSION,
        "lease_id": lease_id,
        "config": read_config(chain),
        "genesis_envelope": bytes(chain.block_txs(0)[0][3]).decode(),
        "headers": headers,
        "transactions": entries,
    }


def cited_marks(lines: Iterable[dict[str, Any]]) -> list[str]:
    """The attested-telemetry keys of the batches bill lines cite: the RecordAttestation that
    wrote each is the quote behind the line's readings."""
    return sorted(
        {mark_key(b["gpu"], b["digest"]) for line in lines for b in line[bill_line.BATCHES]}
    )


def _nonce_of(chain: _Chain, att_id: str) -> str:
    raw = chain.value(ATTESTATION + att_id)
    return str(json.loads(raw)["nonce"]) if raw else ""


def export_roots(path: Path, out: Path) -> list[Path]:
    """Write this ledger's organisation CA certificates as `<MSPID>.pem` (for an operator to
    hand to auditors and tenants through a channel of its own)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for mspid, pem in read_config(_Chain(path))["ca_certs"].items():
        target = out / f"{mspid}.pem"
        target.write_text(pem)
        written.append(target)
    return written


def verify_receipt(receipt: dict[str, Any], roots: dict[str, bytes]) -> list[str]:
    """Defects found in the receipt, checked against `roots` (MSP id -> CA certificate PEM,
    from `load_roots`): the receipt's own channel configuration is trusted only where it
    names exactly these CAs. An empty list means every check passed."""
    try:
        return check_roots(receipt["config"], roots) + _verify(receipt)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        return [f"receipt is malformed: {type(exc).__name__}: {exc}"]


def _verify(receipt: dict[str, Any]) -> list[str]:
    defects: list[str] = []
    config = receipt["config"]
    genesis = receipt["genesis_envelope"].encode()
    if json.loads(genesis)["config"] != config:
        defects.append("config differs from the genesis transaction")
    headers = receipt["headers"]
    previous = GENESIS_PREVIOUS_HASH
    for index, header in enumerate(headers):
        if header["number"] != index or header["previous_hash"] != previous:
            defects.append(f"block {index}: breaks the hash chain")
        if block_header_hash(index, header["previous_hash"], header["data_hash"]) != header["hash"]:
            defects.append(f"block {index}: hash does not match its header")
        previous = header["hash"]
    genesis_hash = hashlib.sha256(hashlib.sha256(genesis).digest()).hexdigest()
    if headers[0]["data_hash"] != genesis_hash:
        defects.append("block 0: data_hash does not match the genesis transaction")
    msp = ChannelMsp({m: c.encode() for m, c in config["ca_certs"].items()})
    policy = EndorsementPolicy.from_json(config["policy"])
    chain = []
    for entry in receipt["transactions"]:
        where = f"block {entry['block']} tx {entry['txnum']} ({entry['tx_id']})"
        envelope = entry["envelope"].encode()
        hashes = entry["block_tx_hashes"]
        if hashes[entry["txnum"]] != hashlib.sha256(envelope).hexdigest():
            defects.append(f"{where}: envelope does not hash to its place in the block")
        data = hashlib.sha256(b"".join(bytes.fromhex(h) for h in hashes)).hexdigest()
        if data != headers[entry["block"]]["data_hash"]:
            defects.append(f"{where}: block data_hash does not match")
        tx = decode_envelope(envelope)
        if tx.tx_id != entry["tx_id"]:
            defects.append(f"{where}: tx_id differs from the envelope's")
        code = check_signatures(tx, msp, policy)
        if code is not None:
            defects.append(f"{where}: {code}")
        if tx.proposal["fn"] == "Settle":
            defects.extend(check_settlement(where, tx.rwset.writes))
        if entry["code"] == VALID:  # a claim: the code is in no hash; the read versions tell
            at = (int(entry["block"]), int(entry["txnum"]))
            chain.append(ChainTx(tx.tx_id, at, tx.rwset.reads, tx.rwset.writes))
    return defects + chain_defects(chain, str(receipt["lease_id"]))


def written_lines(writes: dict[str, bytes | None]) -> list[dict[str, Any]]:
    """The bill lines a transaction wrote (a Settle writes one). ValueError: not JSON."""
    prefix = settlements_prefix()
    return [json.loads(v) for k, v in writes.items() if k.startswith(prefix) and v]


def attested_by(tx_id: str, writes: dict[str, bytes | None]) -> set[str]:
    """The attested-telemetry keys RecordAttestation `tx_id` wrote naming itself as the
    attesting quote, when the attestation record it wrote says the quote was valid (an
    invalid quote attests nothing). ValueError or AttributeError: not what the contract
    writes."""
    if not json.loads(writes.get(ATTESTATION + tx_id) or b"{}").get("valid"):
        return set()
    return {
        key
        for key, value in writes.items()
        if key.startswith(ATTESTED_TELEMETRY)
        and value
        and json.loads(value).get("attestation_id") == tx_id
    }


def check_settlement(where: str, writes: dict[str, bytes | None]) -> list[str]:
    """Re-derive the bill line a Settle transaction wrote from the lease terms it wrote
    beside it (the contract's own records, not the request)."""
    leases = [json.loads(v) for k, v in writes.items() if k.startswith(LEASE) and v]
    lines = written_lines(writes)
    if len(leases) != 1 or len(lines) != 1:
        return [f"{where}: a settlement must write one lease and one line"]
    line = lines[0]
    try:
        terms = billing.terms_for(leases[0], line["start_ms"], line["end_ms"])
    except ContractError as exc:
        return [f"{where}: {exc}"]
    expected = money.interval_line(
        money.Terms.of(terms), line["start_ms"], line["end_ms"], line[bill_line.MEASURED]
    ).as_dict()
    return [
        f"{where}: settlement {name} {line.get(name)} != recomputed {value}"
        for name, value in expected.items()
        if line.get(name) != value
    ]


@dataclass(frozen=True)
class ReceiptTx:
    """One transaction as a receipt (of either backend) shows it: what an auditor reads."""

    fn: str  # the contract function, unqualified (`Settle`)
    valid: bool  # the block marks it VALID (a claim the receipt's verifier proved)
    writes: dict[str, bytes | None]  # the contract's namespace: key -> value (None: deleted)
    at: tuple[int, int] = (0, 0)  # (block, position in the block)


def receipt_txs(receipt: dict[str, Any]) -> dict[str, ReceiptTx]:
    """Every transaction of an embedded receipt that `verify_receipt` passed, by id."""
    out = {}
    for entry in receipt["transactions"]:
        tx = decode_envelope(entry["envelope"].encode())
        at = (int(entry["block"]), int(entry["txnum"]))
        valid = entry["code"] == VALID
        out[entry["tx_id"]] = ReceiptTx(tx.proposal["fn"], valid, dict(tx.rwset.writes), at)
    return out


def load_receipt(path: Path) -> dict[str, Any]:
    return json.loads(read_bounded(path, MAX_RECEIPT_BYTES))
