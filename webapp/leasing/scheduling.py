"""Bridge between the database and the scheduler: the plan input from the fleet and the
queue, the plan applied through the leasing actions, and settlements of leases that ended,
computed by the scheduler from stored telemetry. No pricing or settlement arithmetic here."""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime
from decimal import Decimal
from typing import Any

from ledger.money import settlement_amount
from scheduler import api as scheduler
from scheduler.settlement import terms_from_price_line
from webapp.attestation.models import Attestation
from webapp.fleet.models import GPU, Node, Site
from webapp.fleet.telemetry import latest_by_gpu, samples_between
from webapp.leasing import actions, states
from webapp.leasing.models import Lease

log = logging.getLogger(__name__)

MICRO = Decimal(1_000_000)
PREVIEW_JOB_ID = "preview"
LOADED_UTIL_PCT = 50  # only a reading under load tells what the GPU draws when working


def _attested_nodes() -> dict[int, Attestation]:
    """Nodes that may take new work, with the good quote a lease on them relies on: trusted,
    active, and that quote already on the ledger (which re-checks its age)."""
    out = {}
    for node in Node.objects.filter(status=Node.ACTIVE, trust=Node.TRUSTED):
        good = node.attestations.filter(valid=True).exclude(ledger_tx="").first()
        if good is not None:
            out[node.pk] = good
    return out


def job_entry(
    job_id: str,
    *,
    gpu_count: int,
    precision: str,
    hours: Decimal,
    priority: int = 0,
    min_memory_gb: int = 0,
    single_node: bool = True,
) -> dict[str, Any]:
    """One job of the plan input (docs/scheduler.md), from a lease request's fields."""
    return {
        "id": job_id,
        "gpus": gpu_count,
        "precision": precision,
        "hours": str(hours),
        "priority": priority,
        "min_memory_gb": min_memory_gb,
        "single_node": single_node,
    }


def build_plan_input() -> tuple[dict[str, Any], dict[int, Attestation]]:
    """The fleet and queue in the scheduler's documented schema (docs/scheduler.md)."""
    attested = _attested_nodes()
    holding = {
        lease.pk: lease
        for lease in Lease.objects.filter(state__in=states.HOLDS_GPUS).prefetch_related("gpus")
    }
    busy = {gpu.pk for lease in holding.values() for gpu in lease.gpus.all()}
    latest = latest_by_gpu()
    gpus = []
    for gpu in GPU.objects.select_related("node", "generation"):
        entry: dict[str, Any] = {
            "id": gpu.uuid,
            "generation": gpu.generation.catalogue_id,
            "node": gpu.node.name,
            "site": str(gpu.node.site_id),
            "free": gpu.pk not in busy,
            "attested": gpu.node_id in attested,
        }
        sample = latest.get(gpu.uuid)
        if sample is not None:
            entry["temp_c"] = sample.temp_c
            if sample.util_gpu_pct >= LOADED_UTIL_PCT and sample.power_mw > 0:
                entry["power_w"] = str(Decimal(sample.power_mw) / 1000)
        gpus.append(entry)
    sites = [
        {
            "id": str(s.pk),
            "pue": str(s.pue),
            "tariff_per_kwh": str(Decimal(s.tariff_micro_per_kwh) / MICRO),
        }
        for s in Site.objects.all()
    ]
    leases = [
        {"id": str(pk), "gpus": [g.uuid for g in lease.gpus.all()], "priority": lease.priority}
        for pk, lease in holding.items()
        if lease.state in (states.PLACED, states.ACTIVE)
    ]
    jobs = [
        job_entry(
            str(lease.pk),
            gpu_count=lease.gpu_count,
            precision=lease.precision,
            hours=lease.hours,
            priority=lease.priority,
            min_memory_gb=lease.min_memory_gb,
            single_node=lease.single_node,
        )
        for lease in Lease.objects.filter(state=states.REQUESTED).order_by("created")
    ]
    return {"sites": sites, "gpus": gpus, "leases": leases, "jobs": jobs}, attested


def _terms(
    placement: scheduler.Placement, gpus: list[GPU], attested: dict[int, Attestation]
) -> dict[str, Any]:
    """What a lease records from a placement: the price breakdown, its total in micro-units,
    the attributed energy, and the good quote of each node it runs on."""
    return {
        "price": placement.price.as_dict(),
        "price_total_micro": int(placement.price.total * MICRO),
        "attributed_energy_mj": placement.price.energy_attributed_mj,
        "attestations": sorted({attested[g.node_id] for g in gpus}, key=lambda a: a.pk),
    }


def place_requested(*, actor: str) -> scheduler.Plan:
    """Plan the queue and apply the plan: preemptions first, then placements; every job
    left out keeps its request with the scheduler's reason."""
    data, attested = build_plan_input()
    plan = scheduler.plan_batch(data)
    for preemption in plan.preempted:
        lease = Lease.objects.get(pk=int(preemption.lease))
        actions.preempt_lease(lease, reason=f"preempted by lease {preemption.by_job}", actor=actor)
    by_uuid = {
        g.uuid: g
        for g in GPU.objects.filter(uuid__in=[uuid for p in plan.placements for uuid in p.gpus])
    }
    for placement in plan.placements:
        lease = Lease.objects.get(pk=int(placement.job))
        gpus = [by_uuid[uuid] for uuid in placement.gpus]
        actions.place_lease(lease, gpus, **_terms(placement, gpus, attested), actor=actor)
    for unplaced in plan.unplaced:
        Lease.objects.filter(pk=int(unplaced.job), state=states.REQUESTED).update(
            reason=f"waiting: {unplaced.reason}"
        )
    return plan


def preview(**request: Any) -> dict[str, Any]:
    """What a lease request (the fields of LeaseRequestSerializer) would get if it were
    placed now, planned by the scheduler exactly as the queue is, alone in the queue: the
    GPUs and generation chosen and the scheduler's price breakdown, or why it would wait.
    Nothing is written."""
    data, _ = build_plan_input()
    data["jobs"] = [job_entry(PREVIEW_JOB_ID, **request)]
    plan = scheduler.plan_batch(data)
    if not plan.placements:
        reason = plan.unplaced[0].reason if plan.unplaced else "no capacity"
        return {"placeable": False, "reason": reason}
    placement = plan.placements[0]
    price = placement.price.as_dict()
    return {
        "placeable": True,
        "reason": "",
        "generation": placement.generation,
        "gpus": list(placement.gpus),
        "planned_gpu_hours": str(sum(line.gpu_hours for line in placement.price.lines)),
        # other tenants' leases it would end: how many, never which
        "preempts": len(plan.preempted),
        "price": price,
    }


def settlement_of(lease: Lease, until: datetime | None = None) -> actions.SettlementInput:
    """The settlement of the lease's open interval (since it started, or since its last
    migration) up to `until` (default: when it ended), from its price lines and its GPUs'
    telemetry: measured vs attributed energy, summed over its GPUs, priced once."""
    end_ms = int((until or lease.ended).timestamp() * 1000)
    opened = lease.interval_started or lease.started
    # a lease preempted before it started drew nothing: an empty interval settles to zero
    start_ms = int(opened.timestamp() * 1000) if opened else end_ms
    gpus = list(lease.gpus.all())
    lines = lease.price["lines"]
    terms = [
        terms_from_price_line(
            str(lease.ledger_id),
            line["gpu"],
            line["generation"],
            start_ms,
            Decimal(line["attributed_power_w"]),
            Decimal(line["tariff_per_kwh"]),
            Decimal(line["pue"]),
        )
        for line in lines
    ]
    records = scheduler.settle_lease(
        terms, samples_between(gpus, start_ms, end_ms), start_ms, end_ms
    )
    tariffs = {r.tariff_micro_per_kwh for r in records}
    if len(tariffs) != 1:  # the scheduler keeps a lease on one site, so one tariff
        raise actions.LeaseError(f"lease {lease.pk} spans tariffs {sorted(tariffs)}")
    tariff = tariffs.pop()
    measured = sum(r.measured_mj for r in records)
    attributed = sum(r.attributed_mj for r in records)
    digest = hashlib.sha256(
        "".join(f"{r.gpu}:{r.telemetry_sha256}\n" for r in records).encode()
    ).hexdigest()
    return actions.SettlementInput(
        generation=records[0].generation,
        attributed_energy_mj=attributed,
        measured_energy_mj=measured,
        tariff_micro_per_kwh=tariff,
        amount_micro=settlement_amount(measured, attributed, tariff),
        telemetry_digest=digest,
    )


def settle_closed(*, actor: str) -> int:
    """Settle every lease that stopped drawing energy (ended, preempted, failed while
    running). Returns how many were settled."""
    done = 0
    closing = Lease.objects.filter(
        state__in=(states.ENDING, states.PREEMPTED, states.FAILED),
        started__isnull=False,
        ended__isnull=False,
    )
    for lease in closing:
        try:
            actions.settle_lease(lease, [settlement_of(lease)], actor=actor)
            done += 1
        except Exception:
            log.exception("could not settle lease %s", lease.pk)
    return done


def migrate(lease: Lease, generation: str, *, actor: str) -> Lease:
    """Move an active lease to free, attested GPUs of `generation`, chosen and priced by the
    scheduler for the work that is left; the interval so far is settled at the old terms."""
    from django.utils import timezone

    data, attested = build_plan_input()
    elapsed_h = Decimal((timezone.now() - lease.interval_started).total_seconds()) / 3600
    planned_h = Decimal(lease.price["lines"][0]["gpu_hours"])
    done = min(Decimal(1), elapsed_h / planned_h) if planned_h > 0 else Decimal(1)
    remaining = max(Decimal("0.01"), (lease.hours * (1 - done)).quantize(Decimal("0.01")))
    data["gpus"] = [g for g in data["gpus"] if g["generation"] == generation]
    data["leases"] = []  # a migration never preempts anyone
    data["jobs"] = [
        job_entry(
            str(lease.pk),
            gpu_count=lease.gpu_count,
            precision=lease.precision,
            hours=remaining,
            priority=lease.priority,
            min_memory_gb=lease.min_memory_gb,
            single_node=lease.single_node,
        )
    ]
    plan = scheduler.plan_batch(data)
    if not plan.placements:
        reason = plan.unplaced[0].reason if plan.unplaced else "no capacity"
        raise actions.LeaseError(f"lease {lease.pk} cannot move to {generation}: {reason}")
    placement = plan.placements[0]
    gpus = list(GPU.objects.filter(uuid__in=placement.gpus))
    now = timezone.now()
    return actions.migrate_lease(
        lease,
        gpus,
        settled_before=settlement_of(lease, until=now),
        **_terms(placement, gpus, attested),
        moved_at=now,
        actor=actor,
    )
