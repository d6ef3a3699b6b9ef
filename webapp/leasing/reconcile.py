"""Compare the database (the query model) with the ledger (the source of truth) and list
every difference: leases, their settlements, attestation verdicts, and nodes' AKs. Rows the
relay has not finished (pending, sending) are in flight, not drift; a row the ledger refused
must have left nothing there.

`manage.py reconcile` prints the drift and exits non-zero when there is any."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

from chaincode_client.interface import EndorsementError, LedgerClient
from ledger.contract import bill_line
from webapp.attestation.models import Attestation
from webapp.fleet.models import Node
from webapp.leasing import states
from webapp.leasing.models import Lease
from webapp.outbox import selectors as outbox
from webapp.outbox.models import OutboxEntry
from webapp.outbox.records import lease_prefix
from webapp.tenancy.models import Tenant

ENDED_ON_LEDGER = "ENDED"
MISSING = "does not exist"
NODE_UNKNOWN = "[node.unknown]"


def _query(client: LedgerClient, function: str, **args: Any) -> Any:
    """The query's answer, or None when the ledger has no such record."""
    try:
        return json.loads(client.evaluate(function, json.dumps(args)))
    except EndorsementError as exc:
        if MISSING in str(exc):
            return None
        raise


def _outbox_states(lease: Lease) -> dict[str, str]:
    """Status of this lease's outbox rows, by the last part of their business key."""
    prefix = lease_prefix(lease.ledger_id)
    rows = outbox.lease_rows(lease.ledger_id)
    return {row.business_key.removeprefix(prefix): row.status for row in rows}


def lease_drift(client: LedgerClient, lease: Lease) -> Iterator[str]:
    rows = _outbox_states(lease)
    name = f"lease {lease.pk} ({lease.ledger_id})"
    on_ledger = _query(client, "GetLease", lease_id=str(lease.ledger_id))
    created = rows.get("create")
    if created != OutboxEntry.DONE:
        if on_ledger is not None and created in (None, OutboxEntry.REJECTED):
            yield f"{name}: on the ledger, but the database never recorded it there"
        return
    if on_ledger is None:
        yield f"{name}: recorded as created, but the ledger has no such lease"
        return
    if on_ledger["tenant"] != lease.tenant.slug:
        yield f"{name}: tenant {lease.tenant.slug} here, {on_ledger['tenant']} on the ledger"
    in_flight = {k for k, v in rows.items() if v in outbox.IN_FLIGHT}
    if not any(k.startswith("migrate") for k in in_flight):
        here = sorted(g.uuid for g in lease.gpus.all())
        there = sorted(g["uuid"] for g in on_ledger["gpus"])
        if here != there:
            yield f"{name}: GPUs {here} here, {there} on the ledger"
    if "end" not in in_flight:
        ended_here = lease.state not in states.RUNNING
        ended_there = on_ledger["status"] == ENDED_ON_LEDGER
        if lease.state in states.RUNNING and ended_there:
            yield f"{name}: {lease.state} here, ended on the ledger"
        elif ended_here and rows.get("end") == OutboxEntry.DONE and not ended_there:
            yield f"{name}: {lease.state} here, still {on_ledger['status']} on the ledger"
    yield from settlement_drift(client, lease, name)


# A bill line on the ledger (the Settle record, ledger.contract.bill_line) against its
# Settlement row: the ledger record's field -> the row's column.
LINE_FIELDS = {name: bill_line.stored(name) for name in (*bill_line.FIGURES, "generation")}


def settlement_drift(client: LedgerClient, lease: Lease, name: str) -> Iterator[str]:
    there = {
        s["interval_seq"]: s
        for s in _query(client, "GetSettlements", lease_id=str(lease.ledger_id)) or []
    }
    for settlement in lease.settlements.all():
        record = there.pop(settlement.seq, None)
        if not settlement.ledger_tx:
            continue  # not relayed yet
        if record is None:
            yield f"{name}: settlement #{settlement.seq} recorded here, not on the ledger"
        else:
            differs = [
                f"{field} {getattr(settlement, column)!r} here, {record.get(field)!r} there"
                for field, column in LINE_FIELDS.items()
                if record.get(field) != getattr(settlement, column)
            ]
            if differs:
                yield (
                    f"{name}: settlement #{settlement.seq} differs from the ledger's: "
                    + "; ".join(differs)
                )
    for seq in sorted(there):
        yield f"{name}: settlement #{seq} on the ledger, not here"


def attestation_drift(client: LedgerClient, attestation: Attestation) -> Iterator[str]:
    record = _query(client, "GetAttestation", attestation_id=attestation.ledger_tx)
    name = f"attestation {attestation.pk} ({attestation.ledger_tx})"
    if record is None:
        yield f"{name}: recorded here, not on the ledger"
    elif (record["node_id"], record["valid"]) != (attestation.node.name, attestation.valid):
        yield (
            f"{name}: node/verdict {attestation.node.name}/{attestation.valid} here, "
            f"{record['node_id']}/{record['valid']} on the ledger"
        )


def node_drift(client: LedgerClient, node: Node) -> Iterator[str]:
    """A node enrolled here must be registered on the ledger with the same AK, unrevoked;
    otherwise its quotes count here and nowhere else (a re-enrolment after a restart that the
    ledger refused, say)."""
    if not node.ak_public:
        return
    key = f"node:{node.name}:ak:{node.ak_name}"
    sent = OutboxEntry.objects.filter(business_key=key).values_list("status", flat=True).first()
    if sent in outbox.IN_FLIGHT:
        return  # in flight
    name = f"node {node.name} (AK {node.ak_name[:16]}…)"
    try:
        record = json.loads(client.evaluate("GetNode", json.dumps({"node_id": node.name})))
    except EndorsementError as exc:
        if NODE_UNKNOWN not in str(exc):
            raise
        record = None
    registration = f"its RegisterNode is {sent}" if sent else "no RegisterNode was sent"
    if record is None:
        yield f"{name}: enrolled here, not registered on the ledger ({registration})"
    elif record["ak_public"] != base64.b64encode(bytes(node.ak_public)).decode():
        yield (
            f"{name}: enrolled here with an AK the ledger does not hold (it holds epoch "
            f"{record['ak_epoch']}; {registration}): its quotes count here only"
        )
    elif record["revoked"]:
        yield f"{name}: enrolled here, revoked on the ledger"


def unknown_leases(client: LedgerClient) -> Iterator[str]:
    known = {str(i) for i in Lease.objects.values_list("ledger_id", flat=True)}
    for tenant in Tenant.objects.all():
        for record in _query(client, "LeasesByTenant", tenant=tenant.slug) or []:
            if record["lease_id"] not in known:
                yield f"lease {record['lease_id']} of {tenant.slug}: on the ledger, not here"


def drift(client: LedgerClient) -> list[str]:
    found: list[str] = []
    for lease in Lease.objects.select_related("tenant").prefetch_related("gpus", "settlements"):
        found.extend(lease_drift(client, lease))
    for attestation in Attestation.objects.exclude(ledger_tx="").select_related("node"):
        found.extend(attestation_drift(client, attestation))
    for node in Node.objects.all():
        found.extend(node_drift(client, node))
    found.extend(unknown_leases(client))
    return found
