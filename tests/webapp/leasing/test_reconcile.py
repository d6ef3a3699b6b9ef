"""`manage.py reconcile`: the database against the embedded ledger, with real records."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ledger.contract import bill_line
from tests.webapp.conftest import enrol_node
from webapp.leasing import actions
from webapp.leasing.lifecycle import run_pass
from webapp.leasing.models import Lease, Settlement
from webapp.leasing.reconcile import LINE_FIELDS
from webapp.outbox.relay import relay_once

REQUEST = {"gpu_count": 2, "precision": "FP16", "hours": "1"}


def reconcile() -> str:
    out = StringIO()
    call_command("reconcile", stdout=out)
    return out.getvalue()


def drift_lines() -> list[str]:
    out = StringIO()
    with pytest.raises(CommandError, match=r"difference\(s\) between the database and the ledger"):
        call_command("reconcile", stdout=out)
    return out.getvalue().splitlines()


@pytest.fixture
def settled(owner, attested_node, ledger) -> Lease:
    lease_id = owner.client.post("/api/v1/leases/", REQUEST, format="json").json()["id"]
    run_pass(actor="worker")
    relay_once(ledger)  # the contract: the lease starts
    owner.client.post(f"/api/v1/leases/{lease_id}/end/")
    run_pass(actor="worker")  # settles
    relay_once(ledger)
    return Lease.objects.get(pk=lease_id)


def test_a_settled_lease_agrees_with_the_ledger(settled):
    assert settled.state == "settled" and settled.settlements.get().ledger_tx
    assert "no drift" in reconcile()


def test_rows_still_in_flight_are_not_drift(owner, attested_node, ledger):
    owner.client.post("/api/v1/leases/", REQUEST, format="json")
    run_pass(actor="worker")  # placed: its CreateLease row waits for the relay
    assert "no drift" in reconcile()


def test_a_settlement_that_differs_is_drift(settled):
    line = settled.settlements.get()
    Settlement.objects.filter(pk=line.pk).update(
        total_micro=line.total_micro + 1, measured_energy_mj=line.measured_energy_mj + 1
    )
    [drift] = drift_lines()
    assert f"lease {settled.pk}" in drift and "settlement #0 differs" in drift
    assert f"total_micro {line.total_micro + 1} here, {line.total_micro} there" in drift
    assert f"measured_mj {line.measured_energy_mj + 1} here" in drift
    assert "capacity_micro " not in drift  # the fields that agree are not named


def test_drift_compares_every_figure_of_a_line_by_the_schemas_names():
    assert set(LINE_FIELDS) == {*bill_line.FIGURES, "generation"}
    assert set(LINE_FIELDS.values()) <= {f.name for f in Settlement._meta.get_fields()}


def test_a_lease_the_database_lost_is_drift(settled):
    ledger_id = str(settled.ledger_id)
    Settlement.objects.filter(lease=settled).delete()
    Lease.objects.filter(pk=settled.pk).delete()
    assert drift_lines() == [f"lease {ledger_id} of owner-co: on the ledger, not here"]


def test_a_lease_running_here_but_ended_on_the_ledger_is_drift(owner, attested_node, ledger):
    lease_id = owner.client.post("/api/v1/leases/", REQUEST, format="json").json()["id"]
    run_pass(actor="worker")
    relay_once(ledger)
    actions.end_lease(Lease.objects.get(pk=lease_id), actor="t")
    relay_once(ledger)  # EndLease on the ledger
    Lease.objects.filter(pk=lease_id).update(state="active")  # a database that went back
    [line] = drift_lines()
    assert "active here, ended on the ledger" in line


def test_a_lease_cancelled_after_placement_ends_on_the_ledger_too(owner, attested_node, ledger):
    lease_id = owner.client.post("/api/v1/leases/", REQUEST, format="json").json()["id"]
    run_pass(actor="worker")  # placed: CreateLease queued
    assert owner.client.post(f"/api/v1/leases/{lease_id}/cancel/").json()["state"] == "cancelled"
    relay_once(ledger)  # CreateLease, then EndLease: the ledger frees the GPUs as well
    record = ledger.evaluate(
        "GetLease", f'{{"lease_id": "{Lease.objects.get(pk=lease_id).ledger_id}"}}'
    )
    assert b'"status":"ENDED"' in record.replace(b" ", b"")
    assert Lease.objects.get(pk=lease_id).state == "cancelled"  # the reaction left it alone
    assert "no drift" in reconcile()


def test_a_node_enrolled_again_here_but_refused_by_the_ledger_is_drift(
    attested_node, node_agent, ledger
):
    """A restarted agent that enrols a new AK while the ledger still holds the old one (the
    ledger refuses the second RegisterNode): its quotes would count here only. (A node that
    agrees with the ledger is no drift: test_a_settled_lease_agrees_with_the_ledger.)"""
    enrol_node(node_agent.agent, node_agent.api)
    assert relay_once(ledger) == {"rejected": 1}
    lines = [line for line in drift_lines() if line.startswith("node ")]
    assert len(lines) == 1 and "enrolled here with an AK the ledger does not hold" in lines[0]
    assert "its RegisterNode is rejected" in lines[0]
