"""The outbox relay against the real embedded ledger: an enrolled swtpm node, its quote, a
lease relying on it and the settlement reach the ledger (each quote re-verified by the
contract), receipts come back to the domain rows, and `ledger_verify` audits the chain."""

from __future__ import annotations

import sqlite3
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from ledger.money import settlement_amount
from ledger.receipt import verify_receipt
from webapp.attestation.models import Attestation
from webapp.leasing import actions, states
from webapp.leasing.models import Lease, Settlement
from webapp.outbox.ledger import close_ledger_client
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import relay_once

ACTOR = "test"


def place(tenant, gpus, attestations) -> Lease:
    lease = actions.request_lease(
        tenant, gpu_count=2, precision="FP16", hours=Decimal(1), actor=ACTOR
    )
    return actions.place_lease(
        lease,
        gpus,
        price={},
        price_total_micro=5_000_000,
        attributed_energy_mj=7_200_000_000,
        attestations=attestations,
        actor=ACTOR,
    )


def test_attestation_lease_and_settlement_reach_the_ledger(fleet, tenant, attested_node, ledger):
    assert attested_node.ledger_tx  # the contract re-verified the quote and recorded it
    lease = place(tenant, fleet.gpus[:2], [attested_node])
    assert relay_once(ledger) == {"done": 1}
    actions.activate_lease(lease, actor=ACTOR)
    actions.end_lease(lease, actor=ACTOR)
    amount = settlement_amount(8_000_000_000, 7_200_000_000, 200_000)
    actions.settle_lease(
        lease,
        [
            actions.SettlementInput(
                generation="A100-SXM4-80GB",
                attributed_energy_mj=7_200_000_000,
                measured_energy_mj=8_000_000_000,
                tariff_micro_per_kwh=200_000,
                amount_micro=amount,
                telemetry_digest="ab" * 32,
            )
        ],
        actor=ACTOR,
    )
    assert relay_once(ledger) == {"done": 2}  # EndLease, Settle
    assert Settlement.objects.get(lease=lease).ledger_tx
    assert set(OutboxEntry.objects.values_list("status", flat=True)) == {OutboxEntry.DONE}
    on_chain = ledger.evaluate("GetSettlements", f'{{"lease_id": "{lease.ledger_id}"}}')
    assert str(amount) in on_chain.decode()
    call_command("ledger_verify")


def test_a_lease_without_a_fresh_attestation_is_refused_by_the_ledger(
    fleet, tenant, ledger, attested_node
):
    lease = place(tenant, fleet.gpus[:2], [])
    assert relay_once(ledger) == {"rejected": 1}
    entry = OutboxEntry.objects.get(function="CreateLease")
    assert "attest" in entry.last_error.lower()
    lease.refresh_from_db()
    assert lease.state == states.FAILED and "ledger refused" in lease.reason


def test_a_lease_waits_for_its_attestation_to_reach_the_ledger(
    fleet, tenant, attested_node, ledger
):
    Attestation.objects.filter(pk=attested_node.pk).update(ledger_tx="")
    place(tenant, fleet.gpus[:2], [attested_node])
    assert relay_once(ledger) == {"waiting": 1}
    entry = OutboxEntry.objects.get(function="CreateLease")
    assert entry.status == OutboxEntry.PENDING and entry.next_attempt is not None


def test_relay_retries_are_idempotent(fleet, tenant, attested_node, ledger):
    lease = place(tenant, fleet.gpus[:2], [attested_node])
    relay_once(ledger)
    entry = OutboxEntry.objects.get(function="CreateLease")
    first_tx = entry.tx_id
    entry.status = OutboxEntry.PENDING  # as if the worker died before recording the receipt
    entry.save()
    assert relay_once(ledger) == {"done": 1}  # the ledger answers with what it has
    assert Lease.objects.get(pk=lease.pk).state == states.PLACED
    # a second transaction answered from the stored record; the chain holds one lease
    assert OutboxEntry.objects.get(function="CreateLease").tx_id != first_tx
    history = ledger.evaluate("GetHistory", f'{{"key": "lease:{lease.ledger_id}"}}')
    assert history.decode().count('"tx_id"') == 1


def test_ledger_verify_names_a_tampered_block(settings, attested_node):
    close_ledger_client()
    with sqlite3.connect(settings.LEDGER_PATH) as db:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        assert "blocks" in tables, tables
        db.execute("update blocks set hash = zeroblob(32) where number = 1")
    with pytest.raises(CommandError, match="defect"):
        call_command("ledger_verify")


def test_tenant_receipt_re_checks_offline(fleet, owner, outsider, attested_node, ledger):
    lease = place(owner.tenant, fleet.gpus[:2], [attested_node])
    assert owner.client.get(f"/api/leases/{lease.pk}/receipt/").status_code == 409
    relay_once(ledger)
    response = owner.client.get(f"/api/leases/{lease.pk}/receipt/")
    assert response.status_code == 200
    receipt = response.json()
    assert verify_receipt(receipt) == []
    functions = {"CreateLease", "RecordAttestation", "RegisterNode"}
    assert len(receipt["transactions"]) >= len(functions)
    receipt["transactions"][0]["envelope"] = (
        receipt["transactions"][0]["envelope"][:-8] + "AAAAAAA="
    )
    assert verify_receipt(receipt)  # a tampered receipt no longer checks out
    assert outsider.client.get(f"/api/leases/{lease.pk}/receipt/").status_code == 404
