"""What each domain change asks of the ledger: the contract function, its arguments and the
business key that makes a retried submission idempotent. The only place that knows the
contract's argument shapes on the web app's side."""

from __future__ import annotations

from typing import Any

from webapp.outbox.models import OutboxEntry

# args key holding the Django ids of the attestations a lease relies on; the attestation
# app's preparer (webapp/attestation/reactions.py) swaps them for ledger ids before sending
ATTESTATION_REFS = "_attestation_pks"


def enqueue(business_key: str, function: str, args: dict[str, Any]) -> OutboxEntry:
    """Write an outbox row; call inside the transaction of the change it records."""
    entry, _ = OutboxEntry.objects.get_or_create(
        business_key=business_key, defaults={"function": function, "args": args}
    )
    return entry


def lease_created(lease, attestation_pks: list[int]) -> OutboxEntry:
    return enqueue(
        f"lease:{lease.ledger_id}:create",
        "CreateLease",
        {
            "lease_id": str(lease.ledger_id),
            "tenant": lease.tenant.slug,
            "gpus": sorted(g.uuid for g in lease.gpus.all()),
            "price_terms": {
                "precision": lease.precision,
                "hours": str(lease.hours),
                "price_total_micro": lease.price_total_micro,
                "attributed_energy_mj": lease.attributed_energy_mj,
            },
            ATTESTATION_REFS: attestation_pks,
        },
    )


def lease_migrated(lease, attestation_pks: list[int]) -> OutboxEntry:
    seq = lease.settlements.count()
    return enqueue(
        f"lease:{lease.ledger_id}:migrate:{seq}",
        "MigrateLease",
        {
            "lease_id": str(lease.ledger_id),
            "gpus": sorted(g.uuid for g in lease.gpus.all()),
            ATTESTATION_REFS: attestation_pks,
        },
    )


def lease_ended(lease) -> OutboxEntry:
    return enqueue(f"lease:{lease.ledger_id}:end", "EndLease", {"lease_id": str(lease.ledger_id)})


def settlement_made(settlement) -> OutboxEntry:
    return enqueue(
        f"lease:{settlement.lease.ledger_id}:settle:{settlement.seq}",
        "Settle",
        {
            "lease_id": str(settlement.lease.ledger_id),
            "interval_seq": settlement.seq,
            "attributed_mj": settlement.attributed_energy_mj,
            "measured_mj": settlement.measured_energy_mj,
            "tariff_micro_per_kwh": settlement.tariff_micro_per_kwh,
            "amount_micro": settlement.amount_micro,
            "telemetry_digest": settlement.telemetry_digest,
        },
    )
