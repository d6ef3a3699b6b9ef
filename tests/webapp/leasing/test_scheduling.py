"""The scheduler applied to the database: placement with prices on attested GPUs only,
preemption of lower priority, and settlement from stored telemetry."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from attest.readings import row_text
from ledger import money
from ledger.contract.terms import DEPLOYED as RATE_CARD
from scheduler.telemetry.sample import TelemetrySample as Sample
from webapp.core.models import AuditEvent
from webapp.fleet import rate_card
from webapp.fleet.models import Node
from webapp.fleet.telemetry import record_samples
from webapp.leasing import actions, states
from webapp.leasing.models import Lease
from webapp.leasing.scheduling import (
    apply_plan,
    build_plan_input,
    next_lines,
    open_interval,
    place_requested,
    plan,
)
from webapp.tenancy.models import Tenant

ACTOR = "test"


def request(tenant, gpus=2, priority=0, precision="FP16") -> Lease:
    return actions.request_lease(
        tenant,
        gpu_count=gpus,
        precision=precision,
        hours=Decimal("2"),
        priority=priority,
        actor=ACTOR,
    )


def test_gpus_at_a_site_the_rate_card_does_not_price_are_not_leased(fleet, tenant, attested_node):
    """An operator's site that the rate card has no terms for: its GPUs are left out of the
    plan (the ledger would refuse any lease there), and the pass goes on."""
    fleet.site.name = "dc-not-priced"
    fleet.site.save(update_fields=["name"])
    lease = request(tenant)
    plan = place_requested(actor=ACTOR)
    assert not plan.placements
    assert Lease.objects.get(pk=lease.pk).state == states.REQUESTED


def test_requests_are_placed_and_priced_on_attested_gpus(fleet, tenant, attested_node):
    lease = request(tenant)
    plan = place_requested(actor=ACTOR)
    assert [p.job for p in plan.placements] == [str(lease.pk)]
    lease.refresh_from_db()
    assert lease.state == states.PLACED
    assert lease.price["precision"] == "FP16" and len(lease.price["lines"]) == 2
    assert lease.terms["site"] == "fra-1" and lease.terms["generation"] == "A100-SXM4-80GB"
    assert set(lease.terms["attributed_power_mw"].values()) <= {400_000}  # <= board power
    assert lease.price_total_micro == money.Terms.of(lease.terms).quote() > 0
    assert list(lease.attestations.all()) == [attested_node]


def test_unattested_gpus_are_never_placed(fleet, tenant):
    Node.objects.filter(pk=fleet.node.pk).update(trust=Node.FAILED)
    lease = request(tenant)
    plan = place_requested(actor=ACTOR)
    assert not plan.placements
    lease.refresh_from_db()
    assert lease.state == states.REQUESTED and lease.reason.startswith("waiting:")
    data, _ = build_plan_input()
    assert not any(g["attested"] for g in data["gpus"])
    # the reason is written by an action, audited once: a queue that waits on adds no rows
    waiting = AuditEvent.objects.filter(action="lease.waiting", object_id=str(lease.pk))
    assert [row.data["reason"] for row in waiting] == [lease.reason]
    place_requested(actor=ACTOR)
    assert waiting.count() == 1


def test_higher_priority_preempts_and_the_preempted_lease_is_kept(fleet, tenant, attested_node):
    grant_priority(tenant, 5)
    low = request(tenant, gpus=4, priority=0)
    place_requested(actor=ACTOR)
    high = request(tenant, gpus=4, priority=5)
    plan = place_requested(actor=ACTOR)
    assert [p.lease for p in plan.preempted] == [str(low.pk)]
    assert Lease.objects.get(pk=low.pk).state == states.PREEMPTED
    high = Lease.objects.get(pk=high.pk)
    assert high.state == states.PLACED
    # a priority is paid for: the premium on every GPU-hour the preempting lease holds
    rate = RATE_CARD.capacity_micro_per_gpu_hour["A100-SXM4-80GB"]
    premium = RATE_CARD.priority_premium_micro_per_gpu_hour
    assert high.terms["capacity_micro_per_gpu_hour"] == rate + premium
    assert Lease.objects.get(pk=low.pk).terms["capacity_micro_per_gpu_hour"] == rate


def grant_priority(tenant: Tenant, level: int) -> None:
    """What an operator does in the admin: raise the tenant's priority entitlement."""
    tenant.max_priority = level
    tenant.save(update_fields=["max_priority"])


def test_priority_the_tenant_was_not_granted_is_refused_and_preempts_no_one(
    fleet, tenant, attested_node
):
    running = request(tenant, gpus=4, priority=0)
    place_requested(actor=ACTOR)
    other = Tenant.objects.create(name="Tenant B", slug="tenant-b")
    with pytest.raises(actions.LeaseError, match=r"priority=100 is above .* entitlement \(0\)"):
        request(other, gpus=4, priority=100)
    assert Lease.objects.filter(tenant=other).count() == 0
    place_requested(actor=ACTOR)
    assert Lease.objects.get(pk=running.pk).state == states.PLACED


def test_a_lowered_grant_lowers_the_priority_the_scheduler_uses(fleet, tenant, attested_node):
    running = request(tenant, gpus=4, priority=0)
    place_requested(actor=ACTOR)
    other = Tenant.objects.create(name="Tenant B", slug="tenant-b", max_priority=5)
    waiting = request(other, gpus=4, priority=5)
    grant_priority(other, 0)  # the operator withdraws the grant before the next pass
    plan = place_requested(actor=ACTOR)
    assert not plan.preempted
    assert Lease.objects.get(pk=running.pk).state == states.PLACED
    assert Lease.objects.get(pk=waiting.pk).state == states.REQUESTED


def test_settlement_is_the_schedulers_line_from_the_terms_and_attested_telemetry(
    fleet, tenant, attested_node, node_agent
):
    lease = request(tenant)
    place_requested(actor=ACTOR)
    lease = actions.activate_lease(Lease.objects.get(pk=lease.pk), actor=ACTOR)
    start_ms = lease.terms["start_ms"]
    gpus = list(lease.gpus.all())
    # every GPU draws 500 W for 60 s, one sample per second: the readings of the first
    # half minute reach the server with a quote that binds them, the rest without one
    samples = [
        Sample(g.uuid, start_ms + t * 1000, 10**9 + t * 500_000, 500_000, 90, 60, 70)
        for g in gpus
        for t in range(61)
    ]
    node_agent.attest(
        "".join(row_text(s.canonical()) + "\n" for s in samples if s.t_ms <= start_ms + 30_000)
    )
    record_samples(s for s in samples if s.t_ms > start_ms + 30_000)
    lease.ended = datetime.fromtimestamp((start_ms + 60_000) / 1000, tz=UTC)
    lease.save()
    (settlement,) = next_lines(lease, open_interval(lease))
    assert settlement.measured_mj == 2 * 30 * 500_000  # what no quote attested is not billed
    assert [b.gpu for b in settlement.batches] == sorted(g.uuid for g in gpus)
    assert settlement.line == money.interval_line(
        money.Terms.of(lease.terms), start_ms, start_ms + 60_000, settlement.measured_mj
    )
    # 500 W drawn, 400 W priced, but only half the minute attested: 250 W on average billed
    assert settlement.line.settlement_micro < 0


def test_overlapping_passes_skip_conflicts_and_never_double_book(fleet, tenant, attested_node):
    first = request(tenant, gpus=2)
    second = request(tenant, gpus=2)
    # two workers plan the same queue at the same time ...
    data, attested = build_plan_input()
    stale = plan(data, rate_card.in_force())
    # ... one applies its plan, and the tenant cancels the second request meanwhile
    place_requested(actor="worker-1")
    actions.cancel_lease(Lease.objects.get(pk=second.pk), reason="by tenant", actor=ACTOR)
    third = request(tenant, gpus=2)
    skipped = apply_plan(stale, attested, actor="worker-2")  # does not raise
    assert len(skipped) == 2 and all("place lease" in s for s in skipped)
    assert Lease.objects.get(pk=first.pk).state == states.PLACED
    assert Lease.objects.get(pk=second.pk).state == states.CANCELLED
    place_requested(actor="worker-2")  # the next pass carries on with the rest of the queue
    assert Lease.objects.get(pk=third.pk).state == states.PLACED
    held = [g.pk for lease in Lease.objects.filter(state=states.PLACED) for g in lease.gpus.all()]
    assert len(held) == len(set(held)) == 4
