"""The scheduler applied to the database: placement with prices on attested GPUs only,
preemption of lower priority, and settlement from stored telemetry."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from ledger import money
from ledger.terms import DEPLOYED as RATE_CARD
from scheduler.telemetry.sample import TelemetrySample as Sample
from webapp.fleet.models import Node
from webapp.fleet.telemetry import record_samples
from webapp.leasing import actions, states
from webapp.leasing.models import Lease
from webapp.leasing.scheduling import build_plan_input, place_requested, settlement_of

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


def test_higher_priority_preempts_and_the_preempted_lease_is_kept(fleet, tenant, attested_node):
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


def test_settlement_is_the_schedulers_line_from_the_terms_and_telemetry(
    fleet, tenant, attested_node
):
    lease = request(tenant)
    place_requested(actor=ACTOR)
    lease = actions.activate_lease(Lease.objects.get(pk=lease.pk), actor=ACTOR)
    start_ms = lease.terms["start_ms"]
    gpus = list(lease.gpus.all())
    # every GPU draws 500 W for 60 s, one sample per second
    record_samples(
        Sample(g.uuid, start_ms + t * 1000, 10**9 + t * 500_000, 500_000, 90, 60, 70)
        for g in gpus
        for t in range(61)
    )
    lease.ended = datetime.fromtimestamp((start_ms + 60_000) / 1000, tz=UTC)
    lease.save()
    settlement = settlement_of(lease, final=True)
    assert settlement.measured_mj == 2 * 60 * 500_000
    assert settlement.line == money.interval_line(
        money.Terms.of(lease.terms), start_ms, start_ms + 60_000, settlement.measured_mj
    )
    assert settlement.line.settlement_micro > 0  # 500 W drawn, 400 W priced
