"""Lease stories on a Fabric channel written at run time: the transactions of one lease (its
node's registration and attestation, creation, end and settlement) in signed blocks, and the
receipt an exporter would write of them. Shared by the receipt tests, the fuzz tests and
bench/fabric_receipt_bench.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledger.money import settlement_amount
from tests.ledger.fabric_chain import Channel, receipt

LEASE = "lease-1"
NODE = "node-1"
GPU = {"uuid": "GPU-1", "node_id": NODE, "generation": "A100"}
MEASURED, ATTRIBUTED, TARIFF = 9_000_000_000, 7_200_000_000, 200_000


@dataclass
class Story:
    channel: Channel
    receipt: dict[str, Any]
    roots: bytes
    attestation: str


def settle_request(amount: int | None = None) -> dict[str, Any]:
    expected = settlement_amount(MEASURED, ATTRIBUTED, TARIFF)
    return {
        "lease_id": LEASE,
        "interval_seq": 0,
        "measured_mj": MEASURED,
        "attributed_mj": ATTRIBUTED,
        "tariff_micro_per_kwh": TARIFF,
        "amount_micro": expected if amount is None else amount,
    }


def lease_story(settle: dict[str, Any] | None = None, **create: Any) -> Story:
    """A node registered, attested, leased, the lease ended and settled; another lease's
    transaction shares a block with the attestation."""
    chain = Channel()
    register = chain.tx("RegisterNode", {"node_id": NODE}, {"node_id": NODE, "gpus": [GPU]})
    attest = chain.tx(
        "RecordAttestation",
        {"node_id": NODE},
        lambda tx_id: {"attestation_id": tx_id, "node_id": NODE, "valid": True},
    )
    other = chain.tx("EndLease", {"lease_id": "lease-2"})
    lease = {
        "lease_id": LEASE,
        "gpus": [GPU],
        "attestation_ids": [attest[0]],
        "migrations": [],
        "status": "ACTIVE",
    }
    lease.update(create)
    created = chain.tx("CreateLease", {"lease_id": LEASE}, lambda tx: {**lease, "created_tx": tx})
    ended_lease = {**lease, "created_tx": created[0], "status": "ENDED"}
    ended = chain.tx("EndLease", {"lease_id": LEASE}, ended_lease)
    settle = settle or settle_request()
    settled = chain.tx("Settle", settle, settle)
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
