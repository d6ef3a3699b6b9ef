"""What each domain change asks of the ledger: the contract function, its arguments and the
business key that makes a retried submission idempotent. The only place that knows the
contract's argument shapes on the web app's side."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db.models import F, Value
from django.db.models.functions import Concat
from django.utils.text import slugify

from ledger.contract import bill_line
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


def lease_prefix(ledger_id: object) -> str:
    """The start of the business key of every row about one lease (its ledger id)."""
    return f"lease:{ledger_id}:"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def pcr_policy_id(policy) -> str:
    """The ledger key of a PCR policy: both organisations approve it under this id
    (governance kind "pcr_policy") before a node registers with it."""
    return slugify(policy.name) or f"pcr-policy-{policy.pk}"


def pcr_policy_document(policy) -> dict[str, Any]:
    """The governance document of a PCR policy (ProposePolicy kind "pcr_policy")."""
    return {"pcrs": policy.pcrs, "max_age_s": policy.effective_max_age_s()}


def node_registered(
    node,
    *,
    ek_public: bytes,
    ek_certificate: bytes,
    ak_certificates: dict[str, dict[str, Any]],
    inventory: list[dict[str, str]],
    enrolment_quote: dict[str, Any],
) -> OutboxEntry:
    """RegisterNode after a successful credential activation: the AK, the EK binding (EK
    and its certificate, the AK certificate of every organisation's registrar, each signed
    after its own activation round: ledger.contract.ek_binding), the node's quote over its
    GPU inventory and the PCR policy both organisations approved."""
    return enqueue(
        f"node:{node.name}:ak:{node.ak_name}",
        "RegisterNode",
        {
            "node_id": node.name,
            "org": settings.LEDGER_ORG,
            "ak_public": _b64(node.ak_public),
            "gpus": [
                {"uuid": g.uuid, "generation": g.generation.catalogue_id}
                for g in node.gpus.select_related("generation").order_by("uuid")
            ],
            "pcr_policy_id": pcr_policy_id(node.pcr_policy),
            "ek_binding": {
                "ek_public": _b64(ek_public),
                "ek_certificate": _b64(ek_certificate),
                "ak_certificates": ak_certificates,
            },
            "enrolment_quote": {**enrolment_quote, "inventory": inventory},
        },
    )


def challenges_in_flight(node_name: str | F):
    """The node's IssueChallenge rows the ledger has not answered yet (`node_name`: a name, or
    an expression such as OuterRef("name")). Matched by key, not by reading `args`: the
    key is a string on every row, where JSON functions would parse every other row's args."""
    prefix = (
        f"node:{node_name}:challenge:"
        if isinstance(node_name, str)
        else Concat(Value("node:"), node_name, Value(":challenge:"))
    )
    return OutboxEntry.objects.filter(
        business_key__startswith=prefix,
        status__in=[OutboxEntry.PENDING, OutboxEntry.SENDING],
    )


def _challenge(node_name: str) -> OutboxEntry:
    # each challenge asked for is a new one, so its key is unique
    key = f"node:{node_name}:challenge:{uuid.uuid4().hex}"
    return OutboxEntry(business_key=key, function="IssueChallenge", args={"node_id": node_name})


def challenge_requested(node) -> OutboxEntry:
    """Ask the ledger for an attestation challenge (IssueChallenge), unless one is on its way."""
    waiting = challenges_in_flight(node.name).first()
    if waiting is not None:
        return waiting
    entry = _challenge(node.name)
    entry.save()
    return entry


def challenges_requested(node_names: Iterable[str]) -> list[OutboxEntry]:
    """A challenge for each of these nodes, in one INSERT: the caller has left out those with
    one in flight (challenges_in_flight)."""
    return OutboxEntry.objects.bulk_create([_challenge(name) for name in node_names])


def attestation_answered(attestation, readings: dict[str, str]) -> OutboxEntry:
    """A quote for the ledger to re-verify (RecordAttestation), with the readings it binds
    ({gpu: its rows}; the contract derives their digests and the counters a bill line's
    measured energy comes from: docs/billing.md, "Attested telemetry")."""
    args: dict[str, Any] = {
        "node_id": attestation.node.name,
        "nonce": attestation.nonce,
        "quote": base64.b64encode(bytes(attestation.quote)).decode(),
        "signature": base64.b64encode(bytes(attestation.signature)).decode(),
        "pcr_values": attestation.pcr_values,
    }
    if readings:
        args["readings"] = readings
    # one INSERT, not enqueue's look-up first: the caller's transaction took the nonce
    # (NonceRegistry.consume), so no other row has this key
    return OutboxEntry.objects.create(
        business_key=f"attestation:{attestation.node.name}:{attestation.nonce}",
        function="RecordAttestation",
        args=args,
    )


def lease_created(lease, attestation_pks: list[int]) -> OutboxEntry:
    return enqueue(
        lease_prefix(lease.ledger_id) + "create",
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
        lease_prefix(lease.ledger_id) + f"migrate:{seq}",
        "MigrateLease",
        {
            "lease_id": str(lease.ledger_id),
            "gpus": sorted(g.uuid for g in lease.gpus.all()),
            "terms": lease.terms,
            ATTESTATION_REFS: attestation_pks,
        },
    )


def lease_ended(lease, cancelled_ms: int | None = None) -> OutboxEntry:
    """EndLease at the lease's end (where its final line ends; for a lease cancelled before
    it ran, when it was cancelled): the ledger frees its GPUs from then on, so the next
    lease placed on them may start there."""
    end_ms = lease.ended_ms if cancelled_ms is None else cancelled_ms
    args: dict[str, Any] = {"lease_id": str(lease.ledger_id), "end_ms": end_ms}
    return enqueue(lease_prefix(lease.ledger_id) + "end", "EndLease", args)


def settlement_made(settlement) -> OutboxEntry:
    """One bill line, with the figures the contract recomputes and compares."""
    return enqueue(
        lease_prefix(settlement.lease.ledger_id) + f"settle:{settlement.seq}",
        "Settle",
        bill_line.settle_args(
            str(settlement.lease.ledger_id), settlement.seq, bill_line.from_stored(settlement)
        ),
    )
