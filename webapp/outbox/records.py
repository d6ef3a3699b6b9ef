"""What each domain change asks of the ledger: the contract function, its arguments and the
business key that makes a retried submission idempotent. The only place that knows the
contract's argument shapes on the web app's side."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from ledger import billing
from webapp.outbox.models import OutboxEntry

# args key holding the Django ids of the attestations a lease relies on; the attestation
# app's preparer (webapp/attestation/reactions.py) swaps them for ledger ids before sending
ATTESTATION_REFS = "_attestation_pks"
# Settlement fields the Settle arguments carry under the same names
SETTLEMENT_FIGURES = billing.CLAIMED_RATES + billing.CLAIMED_AMOUNTS


def enqueue(business_key: str, function: str, args: dict[str, Any]) -> OutboxEntry:
    """Write an outbox row; call inside the transaction of the change it records."""
    entry, _ = OutboxEntry.objects.get_or_create(
        business_key=business_key, defaults={"function": function, "args": args}
    )
    return entry


def challenge_requested(node) -> OutboxEntry:
    """Ask the ledger for an attestation challenge (IssueChallenge), unless one is on its way:
    each call that finds none in flight is a new challenge, so the key is unique."""
    prefix = f"node:{node.name}:challenge:"
    waiting = OutboxEntry.objects.filter(
        business_key__startswith=prefix,
        status__in=[OutboxEntry.PENDING, OutboxEntry.SENDING],
    ).first()
    if waiting is not None:
        return waiting
    return enqueue(prefix + uuid.uuid4().hex, "IssueChallenge", {"node_id": node.name})


def attestation_answered(attestation, telemetry: dict[str, str]) -> OutboxEntry:
    """A quote for the ledger to re-verify (RecordAttestation), with the digests of the
    readings it binds ({gpu: batch digest}; docs/billing.md, "Attested telemetry")."""
    args: dict[str, Any] = {
        "node_id": attestation.node.name,
        "nonce": attestation.nonce,
        "quote": base64.b64encode(bytes(attestation.quote)).decode(),
        "signature": base64.b64encode(bytes(attestation.signature)).decode(),
        "pcr_values": attestation.pcr_values,
    }
    if telemetry:
        args["telemetry"] = telemetry
    return enqueue(
        f"attestation:{attestation.node.name}:{attestation.nonce}", "RecordAttestation", args
    )


def lease_created(lease, attestation_pks: list[int]) -> OutboxEntry:
    return enqueue(
        f"lease:{lease.ledger_id}:create",
        "CreateLease",
        {
            "lease_id": str(lease.ledger_id),
            "tenant": lease.tenant.slug,
            "gpus": sorted(g.uuid for g in lease.gpus.all()),
            "terms": lease.terms,
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
            "terms": lease.terms,
            ATTESTATION_REFS: attestation_pks,
        },
    )


def lease_ended(lease) -> OutboxEntry:
    return enqueue(f"lease:{lease.ledger_id}:end", "EndLease", {"lease_id": str(lease.ledger_id)})


def settlement_made(settlement) -> OutboxEntry:
    """One bill line, with the figures the contract recomputes and compares."""
    return enqueue(
        f"lease:{settlement.lease.ledger_id}:settle:{settlement.seq}",
        "Settle",
        {
            "lease_id": str(settlement.lease.ledger_id),
            "interval_seq": settlement.seq,
            "start_ms": settlement.start_ms,
            "end_ms": settlement.end_ms,
            "final": settlement.final,
            "measured_mj": settlement.measured_energy_mj,
            "telemetry_digest": settlement.telemetry_digest,
            "telemetry_batches": settlement.telemetry_batches,
            **{name: getattr(settlement, name) for name in SETTLEMENT_FIGURES},
        },
    )
