"""GET /api/bills/: the caller's bill lines with their ledger evidence, by month; the
dashboard's cost is the sum of the same lines."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from ledger.audit.bill import COMPARED
from tests.webapp.helpers import lines, place
from webapp.dashboard.snapshot import cost_by_tenant
from webapp.leasing import actions
from webapp.leasing.models import Lease

LINE_FIELDS = {
    "lease",
    "seq",
    "interval",
    "capacity_micro",
    "priced_energy_micro",
    "measured_energy_micro",
    "settlement_micro",
    "total_micro",
    "evidence",
}


def billed_lease(caller, gpus, watts: int, count: int = 1) -> Lease:
    """A lease of `caller` on `gpus`, ended, with `count` one-minute bill lines."""
    lease = actions.request_lease(
        caller.tenant, gpu_count=len(gpus), precision="FP16", hours=Decimal(1), actor="t"
    )
    lease = place(lease, gpus, [])
    actions.activate_lease(lease, actor="t")
    lease = actions.end_lease(lease, actor="t")
    return actions.settle_lease(lease, lines(lease, count=count, watts=watts), actor="t")


def this_month() -> str:
    return datetime.now(tz=UTC).strftime("%Y-%m")


def test_it_returns_the_callers_lines_with_evidence(owner, outsider, fleet):
    mine = billed_lease(owner, fleet.gpus[:1], watts=300)
    billed_lease(outsider, fleet.gpus[1:2], watts=400)
    bill = owner.client.get("/api/v1/bills/").json()
    assert bill["count"] == 1 and {line["lease"] for line in bill["lines"]} == {str(mine.ledger_id)}
    (only,) = bill["lines"]
    assert set(only) >= LINE_FIELDS | set(COMPARED) | {"rates"}  # what audit-bill compares
    assert only["total_micro"] == only["capacity_micro"] + only["measured_energy_micro"] > 0
    assert only["settlement_micro"] == only["measured_energy_micro"] - only["priced_energy_micro"]
    assert only["evidence"]["receipt"] == f"/api/v1/leases/{mine.pk}/receipt/"
    assert bill["total_micro"] == only["total_micro"]


def test_it_filters_by_month_and_names_a_bad_one(owner, fleet):
    billed_lease(owner, fleet.gpus[:1], watts=300)
    assert owner.client.get(f"/api/v1/bills/?month={this_month()}").json()["count"] == 1
    assert owner.client.get("/api/v1/bills/?month=2001-01").json()["count"] == 0
    bad = owner.client.get("/api/v1/bills/?month=2026-13")
    assert bad.status_code == 400 and "month" in bad.json()["fields"]


def test_it_validates_ownership(outsider, owner, fleet):
    billed_lease(owner, fleet.gpus[:1], watts=300)
    assert outsider.client.get("/api/v1/bills/").json()["count"] == 0


def test_dashboard_cost_is_the_sum_of_bill_lines(owner, outsider, fleet):
    billed_lease(owner, fleet.gpus[:1], watts=300, count=3)  # one lease, three lines
    billed_lease(outsider, fleet.gpus[1:3], watts=400)
    for caller in (owner, outsider):
        bill = caller.client.get("/api/v1/bills/").json()
        (row,) = [c for c in cost_by_tenant() if c["tenant"] == caller.tenant.name]
        assert row["billed_micro"] == sum(line["total_micro"] for line in bill["lines"]) > 0
    (row,) = [c for c in cost_by_tenant() if c["tenant"] == owner.tenant.name]
    assert row["priced_micro"] == Lease.objects.get(tenant=owner.tenant).price_total_micro


def test_readings_of_a_line_are_served_to_its_tenant_only(owner, outsider, fleet):
    lease = billed_lease(owner, fleet.gpus[:1], watts=300)
    link = owner.client.get("/api/v1/bills/").json()["lines"][0]["evidence"]["readings"]
    assert link == f"/api/v1/leases/{lease.pk}/readings/?seq=0"
    mine = owner.client.get(link)
    assert mine.status_code == 200 and mine["Content-Type"] == "text/csv"
    assert outsider.client.get(link).status_code == 404
    assert owner.client.get(f"/api/v1/leases/{lease.pk}/readings/?seq=7").status_code == 404
    bad = owner.client.get(f"/api/v1/leases/{lease.pk}/readings/?seq=x")
    assert bad.status_code == 400 and "seq" in bad.json()["fields"]
