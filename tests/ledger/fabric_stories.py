"""Lease stories on a Fabric channel written at run time: the transactions of one lease (its
node's registration and attestation, creation, end and settlement) in signed blocks, and the
receipt an exporter would write of them. Shared by the receipt tests, the fuzz tests and
bench/fabric_receipt_bench.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledger.canonical import dumps
from ledger.contract.attested_telemetry import mark_key
from ledger.contract.state import ATTESTATION, SEQ_DIGITS, SETTLEMENT
from ledger.contract.state import LEASE as LEASE_KEY
from tests.ledger.fabric_chain import Channel, receipt
from tests.ledger.helpers import A100, batches_for, lease_terms
from tests.ledger.helpers import settle_request as line_request

LEASE = "lease-1"
NODE = "node-1"
GPU = {"uuid": "GPU-1", "node_id": NODE, "generation": A100}
START_MS = 1_796_000_000_000  # fixed: the stories are the same on every run
HOUR_MS = 3_600_000
MEASURED = 1_200_000_000  # 400 W for an hour, in mJ
TERMS = lease_terms([GPU["uuid"]], generation=A100, start_ms=START_MS, planned_ms=HOUR_MS)


@dataclass
class Story:
    channel: Channel
    receipt: dict[str, Any]
    roots: bytes
    attestation: str


def settle_request(**overrides: Any) -> dict[str, Any]:
    """The honest line of the lease's hour (ledger.money), with `overrides` forged in."""
    return line_request(
        LEASE, 0, TERMS, START_MS, START_MS + HOUR_MS, MEASURED, final=True, **overrides
    )


def settlement_key(seq: int) -> str:
    """The contract's composite key of a lease's line (as stub.create_composite_key)."""
    return f"\x00{SETTLEMENT}\x00{LEASE}\x00{str(seq).zfill(SEQ_DIGITS)}\x00"


def attestation(tx_id: str) -> dict[str, Any]:
    return {"attestation_id": tx_id, "node_id": NODE, "valid": True}


def record_attestation(chain: Channel, attests_readings: bool = True) -> tuple[str, bytes]:
    """A valid RecordAttestation of NODE writing its record and the marks of the batches its
    quote bound, as the contract writes them: what audit-bill finds a line's readings
    attested by (`attests_readings=False`: it bound none)."""

    def attested(tx_id: str) -> dict[str, bytes | None]:
        marks = {
            mark_key(b.gpu, b.digest): dumps({"attestation_id": tx_id, "node_id": NODE})
            for b in batches_for([GPU["uuid"]])
            if attests_readings
        }
        return {ATTESTATION + tx_id: dumps(attestation(tx_id)), **marks}

    return chain.tx("RecordAttestation", {"node_id": NODE}, attestation, writes=attested)


def lease_story(
    settle: dict[str, Any] | None = None, attests_readings: bool = True, **create: Any
) -> Story:
    """A node registered, attested, leased, the lease ended and settled; another lease's
    transaction shares a block with the attestation, whose quote bound the readings the line
    cites (`attests_readings=False`: it bound none)."""
    chain = Channel()
    register = chain.tx("RegisterNode", {"node_id": NODE}, {"node_id": NODE, "gpus": [GPU]})

    attest = record_attestation(chain, attests_readings)
    other = chain.tx("EndLease", {"lease_id": "lease-2"})
    lease = {
        "lease_id": LEASE,
        "gpus": [GPU],
        "attestation_ids": [attest[0]],
        "migrations": [],
        "status": "ACTIVE",
        "tenant": "tenant-a",
        "terms": TERMS,
    }
    lease.update(create)
    created = chain.tx("CreateLease", {"lease_id": LEASE}, lambda tx: {**lease, "created_tx": tx})
    ended_lease = {**lease, "created_tx": created[0], "status": "ENDED"}
    ended = chain.tx("EndLease", {"lease_id": LEASE}, ended_lease)
    settle = settle or settle_request()
    line = {**settle, "generation": A100}
    writes = {
        settlement_key(settle["interval_seq"]): dumps(line),
        LEASE_KEY + LEASE: dumps(ended_lease),
    }
    settled = chain.tx("Settle", settle, line, writes=writes)
    b0 = chain.block([register[1]])
    b1 = chain.block([other[1], attest[1]])
    b2 = chain.block([created[1]])
    b3 = chain.block([ended[1], settled[1]])
    placed = [
        (created[0], b2, 0),
        (ended[0], b3, 0),
        (settled[0], b3, 1),
        (attest[0], b1, 1),
        (register[0], b0, 0),
    ]
    return Story(chain, receipt(chain, LEASE, placed), chain.roots_pem(), attest[0])
