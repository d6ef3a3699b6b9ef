"""Bridge between the database and the scheduler: the plan input from the fleet and the
queue, the plan applied through the leasing actions, and settlements of leases that ended,
computed by the scheduler from stored telemetry. No pricing or settlement arithmetic here."""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ledger.money import from_micro
from ledger.units import ms_of
from scheduler import api as scheduler
from scheduler.grants.interface import ClusterError, GrantRefused
from scheduler.inputs import measured_power_w, remaining_hours
from webapp.attestation import selectors as attestations
from webapp.attestation.models import Attestation
from webapp.attestation.telemetry import attested_batches, attested_through
from webapp.cluster import actions as cluster
from webapp.fleet import rate_card
from webapp.fleet.models import GPU, Node, Site
from webapp.fleet.telemetry import latest_by_gpu
from webapp.leasing import actions, quote, states
from webapp.leasing.entitlements import effective_priority
from webapp.leasing.models import Lease

log = logging.getLogger(__name__)

PREVIEW_JOB_ID = "preview"


def _attested_nodes() -> dict[int, Attestation]:
    """Nodes that may take new work, with the good quote a lease on them relies on: trusted,
    active, and that quote already on the ledger (which re-checks its age)."""
    out = {}
    for node in Node.objects.filter(status=Node.ACTIVE, trust=Node.TRUSTED):
        good = attestations.relied_on(node)
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


def build_plan_input(
    rates: rate_card.InForce | None = None,
) -> tuple[dict[str, Any], dict[int, Attestation]]:
    """The fleet and queue in the scheduler's documented schema (docs/scheduler.md), its
    sites named by the codes of the rate card in force (`rates`), as lease terms name them."""
    rates = rates or rate_card.in_force()
    attested = _attested_nodes()
    holding = {
        lease.pk: lease
        for lease in Lease.objects.filter(state__in=states.HOLDS_GPUS)
        .select_related("tenant")
        .prefetch_related("gpus")
    }
    busy = {gpu.pk for lease in holding.values() for gpu in lease.gpus.all()}
    latest = latest_by_gpu()
    # a site's PUE and tariff are the rate card's, as the terms will have them; a GPU whose
    # site or generation the card does not price gets no terms the ledger accepts
    card = rates.card
    sites, codes = [], {}
    for s in Site.objects.all():
        found = rate_card.site_rates(s.name, card)
        if found is not None:
            pue, tariff = found
            code = card.site_code(s.name)
            sites.append({"id": code, "pue": str(pue), "tariff_per_kwh": str(from_micro(tariff))})
            codes[s.pk] = code
    gpus = []
    unpriced: set[str] = set()
    for gpu in GPU.objects.select_related("node__site", "generation"):
        generation = gpu.generation.catalogue_id
        if gpu.node.site_id not in codes or generation not in card.capacity_micro_per_gpu_hour:
            unpriced.add(f"{gpu.node.site.name}/{generation}")
            continue
        entry: dict[str, Any] = {
            "id": gpu.uuid,
            "generation": generation,
            "node": gpu.node.name,
            "site": codes[gpu.node.site_id],
            "free": gpu.pk not in busy,
            "attested": gpu.node_id in attested,
        }
        sample = latest.get(gpu.uuid)
        if sample is not None:
            entry["temp_c"] = sample.temp_c
            power_w = measured_power_w(sample.util_gpu_pct, sample.power_mw)
            if power_w is not None:
                entry["power_w"] = str(power_w)
        gpus.append(entry)
    if unpriced:
        log.warning("GPUs left out of planning, the rate card prices no %s", sorted(unpriced))
    leases = [
        {
            "id": str(pk),
            "gpus": [g.uuid for g in lease.gpus.all()],
            "priority": effective_priority(lease),
        }
        for pk, lease in holding.items()
        if lease.state in states.PREEMPTIBLE
    ]
    jobs = [
        job_entry(
            str(lease.pk),
            gpu_count=lease.gpu_count,
            precision=lease.precision,
            hours=lease.hours,
            priority=effective_priority(lease),
            min_memory_gb=lease.min_memory_gb,
            single_node=lease.single_node,
        )
        for lease in Lease.objects.filter(state=states.REQUESTED)
        .select_related("tenant")
        .order_by("created")
    ]
    return {"sites": sites, "gpus": gpus, "leases": leases, "jobs": jobs}, attested


def _terms(
    placement: scheduler.Placement,
    gpus: list[GPU],
    attested: dict[int, Attestation],
    start: datetime,
) -> dict[str, Any]:
    """What a lease records from a placement: the price breakdown, the ledger terms the
    scheduler built with the placement (from `start` on), and the good quote of each node
    it runs on."""
    return {
        "price": placement.price.as_dict(),
        "terms": placement.lease_terms(ms_of(start)),
        "attestations": sorted({attested[g.node_id] for g in gpus}, key=lambda a: a.pk),
    }


def plan(data: dict[str, Any], rates: rate_card.InForce) -> scheduler.Plan:
    """The scheduler's plan of `data` under the rate card and catalogue in force: ranked by
    what each tenant pays, each placement with its lease terms and quote."""
    return scheduler.plan_batch(data, rates.catalogue, card=rates.card)


def place_requested(*, actor: str) -> scheduler.Plan:
    """Plan the queue and apply the plan: preemptions first, then placements; every job
    left out keeps its request with the scheduler's reason."""
    rates = rate_card.in_force()
    data, attested = build_plan_input(rates)
    planned = plan(data, rates)
    apply_plan(planned, attested, actor=actor)
    return planned


def apply_plan(plan: scheduler.Plan, attested: dict[int, Attestation], *, actor: str) -> list[str]:
    """Apply each step of `plan` through the leasing actions. Passes may overlap (several
    lease workers, or an operator's action in between): a step the database no longer
    allows (the lease moved on, a GPU was taken) is skipped with its reason, and the rest
    of the pass goes on. Returns the skipped steps' reasons."""
    skipped: list[str] = []

    def attempt(step: str, do: Any) -> bool:
        try:
            do()
        except (states.IllegalTransition, actions.LeaseError) as conflict:
            log.info("placement pass: skipped %s: %s", step, conflict)
            skipped.append(f"{step}: {conflict}")
            return False
        return True

    for preemption in plan.preempted:
        # the preempting tenant's priority premium (the billing model, ledger/money.py) is
        # charged here, where the preemption is decided
        lease = Lease.objects.get(pk=int(preemption.lease))
        attempt(
            f"preempt lease {lease.pk}",
            lambda lease=lease, by=preemption.by_job: actions.preempt_lease(
                lease, reason=f"preempted by lease {by}", actor=actor
            ),
        )
    by_uuid = {
        g.uuid: g
        for g in GPU.objects.filter(uuid__in=[uuid for p in plan.placements for uuid in p.gpus])
    }
    now = timezone.now()
    placing = [
        (
            placement,
            Lease.objects.select_related("tenant").get(pk=int(placement.job)),
            [by_uuid[uuid] for uuid in placement.gpus],
        )
        for placement in plan.placements
    ]
    grants = _grants([(lease, gpus) for _, lease, gpus in placing], actor=actor)
    for (placement, lease, gpus), granted in zip(placing, grants, strict=True):
        if granted is False:
            continue
        start = granted.at if granted else now  # billing starts when access does
        placed = attempt(
            f"place lease {lease.pk}",
            lambda lease=lease, gpus=gpus, placement=placement, start=start, granted=granted: (
                actions.place_lease(
                    lease,
                    gpus,
                    **_terms(placement, gpus, attested, start),
                    granted=granted,
                    actor=actor,
                )
            ),
        )
        if not placed and granted:  # the GPUs went elsewhere meanwhile: no grant without it
            _release(lease, granted, actor=actor)
    for unplaced in plan.unplaced:
        lease = Lease.objects.get(pk=int(unplaced.job))
        actions.note_waiting(lease, reason=f"waiting: {unplaced.reason}", actor=actor)
    return skipped


def _grants(
    placing: list[tuple[Lease, list[GPU]]], *, actor: str
) -> list[cluster.Granted | None | Literal[False]]:
    """The cluster's grant of exactly its GPUs for each lease to place, all submitted
    together, before any is placed (None each where no cluster grants leases). False where
    it could not be had: a refusal fails the lease with the cluster's reason (it never ran,
    nothing is billed); a cluster that cannot be asked leaves it waiting for the next pass."""
    if cluster.backend() is None or not placing:
        return [None] * len(placing)
    asked = [
        cluster.LeaseGrant(
            str(lease.ledger_id),
            lease.tenant,
            lease.cluster_user,
            gpus,
            float(lease.hours) * settings.LEASE_HOUR_S,
        )
        for lease, gpus in placing
    ]
    try:
        outcomes = cluster.grant_leases(asked, actor=actor)
    except ClusterError as unavailable:
        outcomes = [unavailable] * len(placing)
    out: list[cluster.Granted | None | Literal[False]] = []
    for (lease, _), outcome in zip(placing, outcomes, strict=True):
        if isinstance(outcome, GrantRefused):
            with contextlib.suppress(states.IllegalTransition):
                actions.fail_lease(
                    lease, reason=f"the cluster refused the grant: {outcome}", actor=actor
                )
            out.append(False)
        elif isinstance(outcome, ClusterError):
            actions.note_waiting(lease, reason=f"waiting: the cluster: {outcome}", actor=actor)
            out.append(False)
        else:
            out.append(outcome)
    return out


def _release(lease: Lease, granted: cluster.Granted, *, actor: str) -> None:
    try:
        cluster.release(
            lease.tenant, str(lease.ledger_id), [g["handle"] for g in granted.grants], actor=actor
        )
    except ClusterError:
        log.exception("lease %s: could not release its grant; reconcile will", lease.pk)


def preview(**request: Any) -> dict[str, Any]:
    """What a lease request (the fields of LeaseRequestSerializer) would get if it were
    placed now, planned by the scheduler exactly as the queue is, alone in the queue: the
    GPUs and generation chosen, the quote (`quote_micro`: the lease terms' Terms.quote(),
    what the ledger would record) with its two parts, and the scheduler's energy breakdown,
    or why it would wait. Nothing is written."""
    rates = rate_card.in_force()
    data, _ = build_plan_input(rates)
    data["jobs"] = [job_entry(PREVIEW_JOB_ID, **request)]
    planned = plan(data, rates)
    if not planned.placements:
        reason = planned.unplaced[0].reason if planned.unplaced else "no capacity"
        return {"placeable": False, "reason": reason}
    placement = planned.placements[0]
    return {
        "placeable": True,
        "reason": "",
        "generation": placement.generation,
        "gpus": list(placement.gpus),
        "planned_gpu_hours": str(sum(line.gpu_hours for line in placement.price.lines)),
        # other tenants' leases it would end: how many, never which
        "preempts": len(planned.preempted),
        "quote_micro": placement.quote_micro,
        "quote": quote.explain(placement.lease_terms(0)),
        "price": placement.price.as_dict(),
    }


@dataclass(frozen=True)
class OpenInterval:
    """The next stretch of a lease to bill: before its oldest unsettled move (the GPUs and
    terms it had then, up to the move), else up to its end (its GPUs and terms, final)."""

    gpus: list[GPU]
    terms: dict[str, Any]
    end_ms: int
    final: bool


def open_interval(lease: Lease) -> OpenInterval | None:
    """The lease's next interval to settle, or None while it has no end to settle up to (it
    runs, and no move is waiting for its line)."""
    if lease.unsettled_moves:
        move = lease.unsettled_moves[0]
        gpus = list(GPU.objects.filter(uuid__in=move["gpus"]).order_by("uuid"))
        return OpenInterval(gpus, move["terms"], move["until_ms"], final=False)
    if lease.ended_ms is None:
        return None
    return OpenInterval(list(lease.gpus.all()), lease.terms, lease.ended_ms, final=True)


def next_lines(lease: Lease, interval: OpenInterval) -> list[scheduler.IntervalSettlement]:
    """The scheduler's lines of `interval`, from the end of the lease's last line (or the
    start of the interval's terms): one, or several when it has more attested batches than one
    line may cite (scheduler.settle_lines); measured from its GPUs' attested readings
    (docs/billing.md, "Attested telemetry"). Stored and relayed as they are; nothing is
    recomputed here."""
    last = lease.settlements.order_by("-seq").first()
    start_ms = last.end_ms if last else interval.terms["start_ms"]
    end_ms = max(start_ms, interval.end_ms)
    return scheduler.settle_lines(
        str(lease.ledger_id),
        lease.settlements.count(),
        interval.terms,
        attested_batches(interval.gpus, start_ms, end_ms),
        start_ms,
        end_ms,
        final=interval.final,
    )


def settle_closed(*, actor: str) -> int:
    """Settle what is due: the interval before each move once its readings are in, and every
    lease that stopped drawing energy (ended, preempted, failed while running). Returns how
    many leases were settled to their end."""
    done = 0
    closing = Q(
        state__in=states.AWAITING_SETTLEMENT,
        started__isnull=False,
        ended__isnull=False,
    )
    moved = ~Q(unsettled_moves=[])  # a move whose line is still to come
    due = Lease.objects.filter(closing | moved)
    for lease_id in list(due.values_list("pk", flat=True)):
        try:
            with transaction.atomic():
                # claim: a lease another worker is settling is skipped, not waited for
                lease = due.select_for_update(skip_locked=True).filter(pk=lease_id).first()
                if lease is None:
                    continue  # settled meanwhile, or another worker holds it
                done += _settle_due(lease, actor)
        except Exception:
            log.exception("could not settle lease %s", lease_id)
    return done


def _settle_due(lease: Lease, actor: str) -> int:
    """Settle the lease's intervals in order while their telemetry is in; 1 when that
    reached its end (the lease is settled), else 0."""
    while (interval := open_interval(lease)) is not None and _telemetry_in(interval):
        lines = next_lines(lease, interval)
        if interval.final:
            actions.settle_lease(lease, lines, actor=actor)
            return 1
        lease = actions.settle_move(lease, lines, actor=actor)
    return 0  # a later pass settles the rest on all of its readings


def _telemetry_in(interval: OpenInterval) -> bool:
    """Whether quotes have bound the readings of the interval's GPUs up to its end, so its
    line measures all of them (docs/billing.md, "Attested telemetry"); TELEMETRY_SETTLE_WAIT_S
    after its end it is settled on what was attested (a GPU whose node stopped quoting would
    keep it from ever being billed)."""
    waited_ms = settings.TELEMETRY_SETTLE_WAIT_S * 1000
    if time.time() * 1000 - interval.end_ms >= waited_ms:
        return True
    return attested_through(interval.gpus, interval.end_ms)


def migrate(lease: Lease, generation: str, *, actor: str) -> Lease:
    """Move an active lease to free, attested GPUs of `generation`, chosen and priced by the
    scheduler for the work that is left; the interval so far is settled at the old terms by
    the next settle pass after its readings are attested (settle_closed)."""
    states.check_migration(lease.pk, lease.state)  # before reading its running interval
    rates = rate_card.in_force()
    data, attested = build_plan_input(rates)
    elapsed_ms = ms_of(timezone.now()) - ms_of(lease.interval_started)
    remaining = remaining_hours(lease.hours, elapsed_ms, lease.terms["planned_ms"])
    data["gpus"] = [g for g in data["gpus"] if g["generation"] == generation]
    data["leases"] = []  # a migration never preempts anyone
    data["jobs"] = [
        job_entry(
            str(lease.pk),
            gpu_count=lease.gpu_count,
            precision=lease.precision,
            hours=remaining,
            priority=effective_priority(lease),
            min_memory_gb=lease.min_memory_gb,
            single_node=lease.single_node,
        )
    ]
    planned = plan(data, rates)
    if not planned.placements:
        reason = planned.unplaced[0].reason if planned.unplaced else "no capacity"
        raise actions.LeaseError(f"lease {lease.pk} cannot move to {generation}: {reason}")
    placement = planned.placements[0]
    gpus = list(GPU.objects.filter(uuid__in=placement.gpus).select_related("node", "generation"))
    old_handles = [g["handle"] for g in lease.grants]
    granted = None
    if cluster.backend() is not None:
        try:  # the new GPUs first: a move the cluster refuses leaves the lease where it is
            granted = cluster.grant(
                str(lease.ledger_id),
                lease.tenant,
                lease.cluster_user,
                gpus,
                hours_s=float(remaining) * settings.LEASE_HOUR_S,
                actor=actor,
            )
        except ClusterError as exc:
            raise actions.LeaseError(f"lease {lease.pk} cannot move: the cluster: {exc}") from None
    now = granted.at if granted else timezone.now()
    try:
        moved = actions.migrate_lease(
            lease,
            gpus,
            **_terms(placement, gpus, attested, now),
            moved_at=now,
            granted=granted,
            actor=actor,
        )
    except BaseException:
        if granted:
            _release(lease, granted, actor=actor)
        raise
    if granted:  # the old grant goes, and its jobs with it (docs/operations.md, "Migration")
        new = {g["handle"] for g in granted.grants}
        stale = [h for h in old_handles if h not in new]
        try:
            cluster.release(lease.tenant, str(lease.ledger_id), stale, actor=actor)
        except ClusterError:
            log.exception("lease %s: its old grant %s stays until reconcile", lease.pk, stale)
    return moved
